/*
 * cmece: rdma_set_local_ece, rdma_get_remote_ece, rdma_reject_ece and
 * rdma_notify answer as rdma-core's librdmacm (cma.c) over the kernel's
 * rdma_cm on a device without ECE (rxe, siw):
 *  - set_local_ece: EINVAL for a NULL ID or ece, vendor_id 0, a comp_mask,
 *    or an ID with a QP; get_remote_ece: EINVAL for a NULL ID or ece, or an
 *    ID with a QP, else the peer's values: zero when it sent none;
 *  - reject_ece: the client's REJECTED has status 35 over RoCE (IBTA's
 *    "vendor option not supported"; iWARP's MPA reject has no reason);
 *  - rdma_notify (the kernel's rdma_notify): EINVAL before the ID connects;
 *    on an established RoCE connection COMM_EST is EISCONN, PATH_MIG is
 *    taken, another event is EINVAL; iWARP takes any event once connected.
 * One process connects to itself through one device.
 *
 * Usage: cmece roce|iwarp ADDR PORT. Prints "ok" and exits 0, or names the
 * failed check and exits 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "cmsteps.h"

/* want checks that r (a librdmacm call's return) is 0 for e == 0, or -1 with
 * errno e. */
static void want(const char *what, int r, int e)
{
	if ((e == 0 && r != 0) || (e != 0 && (r != -1 || errno != e))) {
		printf("FAIL: %s: returned %d errno %d, want %s %d\n", what, r, r ? errno : 0, e ? "errno" : "", e);
		exit(1);
	}
}

static struct rdma_conn_param cp = {.initiator_depth = 1, .responder_resources = 1, .retry_count = 7, .rnr_retry_count = 7};

/* client makes an ID on ch, resolved to sa, with a QP, and connects it. */
static struct rdma_cm_id *client(struct rdma_event_channel *ch, struct sockaddr_in *sa)
{
	struct rdma_cm_id *c;
	if (rdma_create_id(ch, &c, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	want("notify on a fresh ID", rdma_notify(c, IBV_EVENT_COMM_EST), EINVAL);
	if (rdma_resolve_addr(c, NULL, (struct sockaddr *)sa, 2000))
		fail("rdma_resolve_addr");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(c, 2000))
		fail("rdma_resolve_route");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	want("notify before connecting", rdma_notify(c, IBV_EVENT_COMM_EST), EINVAL);
	qp(c);
	if (rdma_connect(c, &cp))
		fail("rdma_connect");
	return c;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: cmece roce|iwarp ADDR PORT\n");
		return 2;
	}
	int roce = !strcmp(argv[1], "roce");
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(argv[3]));
	if (inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
		fail("inet_pton");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l;
	if (!ch || rdma_create_id(ch, &l, NULL, RDMA_PS_TCP))
		fail("create");
	if (rdma_bind_addr(l, (struct sockaddr *)&sa) || rdma_listen(l, 2))
		fail("listen");

	/* The ECE values before a QP. */
	struct ibv_ece e = {.vendor_id = 0x15b3, .options = 7};
	want("set_local_ece NULL id", rdma_set_local_ece(NULL, &e), EINVAL);
	want("set_local_ece NULL ece", rdma_set_local_ece(l, NULL), EINVAL);
	struct ibv_ece bad = {.vendor_id = 0, .options = 1};
	want("set_local_ece vendor_id 0", rdma_set_local_ece(l, &bad), EINVAL);
	bad.vendor_id = 1;
	bad.comp_mask = 1;
	want("set_local_ece with a comp_mask", rdma_set_local_ece(l, &bad), EINVAL);
	want("set_local_ece", rdma_set_local_ece(l, &e), 0);
	struct ibv_ece r;
	memset(&r, 0xa5, sizeof(r));
	want("get_remote_ece without a peer", rdma_get_remote_ece(l, &r), 0);
	if (r.vendor_id || r.options || r.comp_mask) {
		errno = 0;
		fail("get_remote_ece without a peer is not all zero");
	}
	want("get_remote_ece NULL id", rdma_get_remote_ece(NULL, &r), EINVAL);
	want("get_remote_ece NULL ece", rdma_get_remote_ece(l, NULL), EINVAL);

	/* 1. rdma_reject_ece. */
	struct rdma_cm_id *c = client(ch, &sa);
	struct rdma_cm_event *req = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *s = req->id;
	rdma_ack_cm_event(req);
	memset(&r, 0xa5, sizeof(r));
	want("get_remote_ece of a request", rdma_get_remote_ece(s, &r), 0);
	if (r.vendor_id || r.options || r.comp_mask) {
		errno = 0;
		fail("the request's remote ECE is not zero (the peer sent none)");
	}
	want("notify on a request not answered (PATH_MIG)", rdma_notify(s, IBV_EVENT_PATH_MIG), roce ? EINVAL : 0);
	want("reject_ece", rdma_reject_ece(s, NULL, 0), 0);
	struct rdma_cm_event *rej = next(ch, RDMA_CM_EVENT_REJECTED);
	if (rej->id != c || (roce && rej->status != 35)) {
		printf("FAIL: REJECTED of %s with status %d, want the client's%s\n", rej->id == c ? "the client" : "another ID",
		       rej->status, roce ? " with 35" : "");
		exit(1);
	}
	rdma_ack_cm_event(rej);
	want("set_local_ece with a QP", rdma_set_local_ece(c, &e), EINVAL);
	want("get_remote_ece with a QP", rdma_get_remote_ece(c, &r), EINVAL);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(s);

	/* 2. rdma_notify on an established connection. */
	c = client(ch, &sa);
	req = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	s = req->id;
	rdma_ack_cm_event(req);
	qp(s);
	if (rdma_accept(s, &cp))
		fail("rdma_accept");
	for (int i = 0; i < 2; i++)
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
	want("notify COMM_EST, established", rdma_notify(c, IBV_EVENT_COMM_EST), roce ? EISCONN : 0);
	want("notify PATH_MIG, established", rdma_notify(s, IBV_EVENT_PATH_MIG), 0);
	want("notify QP_FATAL, established", rdma_notify(c, IBV_EVENT_QP_FATAL), roce ? EINVAL : 0);
	want("notify on the listener (COMM_EST)", rdma_notify(l, IBV_EVENT_COMM_EST), roce ? EINVAL : 0);
	rdma_disconnect(c);
	printf("ok\n");
	return 0;
}
