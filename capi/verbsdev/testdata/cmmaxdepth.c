/*
 * cmmaxdepth: rdma_connect and rdma_accept take RDMA_MAX_INIT_DEPTH and
 * RDMA_MAX_RESP_RES (0xff) as "the device's maximum", as rdma-core's librdmacm
 * does (cma.c: ucma_valid_param lets them through; rdma_connect and
 * rdma_accept put the device's max_initiator_depth / max_responder_resources
 * in their place), and refuse other values above the device's (EINVAL).
 * One process connects to itself through one device.
 *
 * Usage: cmmaxdepth ADDR PORT. Prints "ok" and exits 0, or names the failed
 * check and exits 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "cmsteps.h"

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cmmaxdepth ADDR PORT\n");
		return 2;
	}
	struct sockaddr_in sa = ipv4(argv[1], argv[2]);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c;
	listen_and_resolve(ch, &sa, &l, &c);
	qp(c);
	struct ibv_device_attr da;
	if (ibv_query_device(c->verbs, &da))
		fail("ibv_query_device");
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	if (da.max_qp_init_rd_atom < 0xfe) {
		p.initiator_depth = da.max_qp_init_rd_atom + 1;
		if (rdma_connect(c, &p) == 0 || errno != EINVAL) {
			errno = 0;
			fail("rdma_connect with an initiator depth above the device's is not EINVAL");
		}
	}
	p.initiator_depth = RDMA_MAX_INIT_DEPTH;
	p.responder_resources = RDMA_MAX_RESP_RES;
	if (rdma_connect(c, &p))
		fail("rdma_connect with RDMA_MAX_INIT_DEPTH and RDMA_MAX_RESP_RES");
	struct rdma_cm_event *req = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *s = req->id;
	rdma_ack_cm_event(req);
	qp(s);
	if (rdma_accept(s, &p))
		fail("rdma_accept with RDMA_MAX_INIT_DEPTH and RDMA_MAX_RESP_RES");
	int est = 0;
	while (est < 2) {
		struct rdma_cm_event *ev = next(ch, RDMA_CM_EVENT_ESTABLISHED);
		est++;
		rdma_ack_cm_event(ev);
	}
	rdma_disconnect(c);
	printf("ok\n");
	return 0;
}
