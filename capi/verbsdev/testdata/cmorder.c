/* cmorder: rdma_cm calls out of order and with wrong arguments, each answer
 * checked against librdmacm over the kernel's rdma_cm (rdma-core's
 * librdmacm/cma.c, Linux's drivers/infiniband/core/cma.c and ucma.c; each
 * case cites where its answer comes from). Output as checks.h says (-1 and
 * errno are given as the errno); exits 0 when every check passed.
 *
 * Usage: cmorder ADDR (an address of the softrdma device in SOFTRDMA_DEVICES). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "checks.h"

/* CM(name, want, call): an rdma_cm call that returns 0, or -1 and errno. */
#define CM(name, want, call)                                                                      \
	do {                                                                                      \
		mark(name, (want) != 0);                                                          \
		errno = 0;                                                                        \
		int r_ = (call);                                                                  \
		expect(name, r_ == 0 ? 0 : r_ == -1 ? errno : 1000 + r_, want);                   \
	} while (0)

static struct rdma_event_channel *ch;

static struct rdma_cm_id *new_id(void)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return NULL;
	return id;
}

/* event waits (bounded by the channel being blocking and the test's limit)
 * for the next event and returns its type, acknowledged. */
static int event(void)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		return -1;
	int t = e->event;
	rdma_ack_cm_event(e);
	return t;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	struct sockaddr_in a = {.sin_family = AF_INET};
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1)
		return 2;
	ch = rdma_create_event_channel();
	if (!ch)
		return 2;
	struct rdma_cm_id *id = new_id(), *lid = new_id(), *fresh = new_id();
	if (!id || !lid || !fresh)
		return 2;
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};

	/* A fresh ID (RDMA_CM_IDLE). cma.c: rdma_resolve_route needs
	 * ADDR_RESOLVED, rdma_reject and rdma_disconnect a CM ID (cm_id.ib),
	 * each -EINVAL. librdmacm ucma_valid_param: connect or accept without a
	 * QP and without parameters, EINVAL. */
	CM("resolve_route on a fresh ID", EINVAL, rdma_resolve_route(fresh, 2000));
	CM("connect on a fresh ID without a QP or parameters", EINVAL, rdma_connect(fresh, NULL));
	CM("accept on a fresh ID without a QP or parameters", EINVAL, rdma_accept(fresh, NULL));
	CM("reject on a fresh ID", EINVAL, rdma_reject(fresh, NULL, 0));
	/* rdma_join_multicast: an RC (RDMA_PS_TCP) ID cannot join (cma.c:
	 * "Only UD QPs can join multicast"), -EINVAL. */
	struct sockaddr_in mc = {.sin_family = AF_INET};
	inet_pton(AF_INET, "239.1.2.3", &mc.sin_addr);
	CM("join_multicast on an RC ID", EINVAL, rdma_join_multicast(fresh, (struct sockaddr *)&mc, NULL));

	/* Bound. cma.c rdma_bind_addr: only from IDLE, -EINVAL. */
	struct sockaddr_in la = a;
	la.sin_port = htons(0);
	CM("bind_addr", 0, rdma_bind_addr(lid, (struct sockaddr *)&la));
	CM("bind_addr twice", EINVAL, rdma_bind_addr(lid, (struct sockaddr *)&la));
	/* rdma_connect needs ROUTE_RESOLVED, -EINVAL (the device is known once
	 * bound: ucma_valid_param takes the parameters). */
	CM("connect on a bound ID", EINVAL, rdma_connect(lid, &p));
	CM("listen", 0, rdma_listen(lid, 4));
	/* rdma_listen: only from ADDR_BOUND (or IDLE, which binds first): a
	 * second listen is -EINVAL. rdma_accept needs CONNECT: -EINVAL on a
	 * listener. */
	CM("listen twice", EINVAL, rdma_listen(lid, 4));
	CM("accept on a listening ID", EINVAL, rdma_accept(lid, &p));
	CM("resolve_route on a listening ID", EINVAL, rdma_resolve_route(lid, 2000));

	/* Address resolved (ADDR_RESOLVED). rdma_connect needs ROUTE_RESOLVED,
	 * rdma_accept CONNECT; rdma_disconnect and rdma_reject need a CM ID:
	 * -EINVAL each. */
	struct sockaddr_in dst = a;
	dst.sin_port = ((struct sockaddr_in *)rdma_get_local_addr(lid))->sin_port;
	CM("resolve_addr", 0, rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	mark("resolve_addr: ADDR_RESOLVED", 0);
	expect("resolve_addr: ADDR_RESOLVED", event(), RDMA_CM_EVENT_ADDR_RESOLVED);
	CM("connect before resolve_route", EINVAL, rdma_connect(id, &p));
	CM("accept on a connecting ID", EINVAL, rdma_accept(id, &p));
	CM("disconnect before connecting", EINVAL, rdma_disconnect(id));
	CM("reject on a connecting ID", EINVAL, rdma_reject(id, NULL, 0));
	/* librdmacm rdma_create_qp_ex: a second QP on the ID, EINVAL. */
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	CM("create_qp", 0, rdma_create_qp(id, NULL, &qa));
	CM("create_qp twice", EINVAL, rdma_create_qp(id, NULL, &qa));

	/* The route resolved: now the connection goes through. */
	CM("resolve_route", 0, rdma_resolve_route(id, 2000));
	mark("resolve_route: ROUTE_RESOLVED", 0);
	expect("resolve_route: ROUTE_RESOLVED", event(), RDMA_CM_EVENT_ROUTE_RESOLVED);
	CM("resolve_route twice", EINVAL, rdma_resolve_route(id, 2000));
	CM("connect", 0, rdma_connect(id, &p));
	CM("connect twice", EINVAL, rdma_connect(id, &p));

	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(lid);
	rdma_destroy_id(fresh);
	/* rdma_ack_cm_event (librdmacm): a NULL event, EINVAL. */
	CM("ack_cm_event NULL", EINVAL, rdma_ack_cm_event(NULL));
	rdma_destroy_event_channel(ch);
	printf("checks: %d, bad: %d\n", total, bad);
	return bad ? 1 : 0;
}
