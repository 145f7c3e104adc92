/*
 * cmqpex: rdma_create_qp_ex honours IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, as
 * rdma-core's librdmacm does (cma.c: rdma_create_qp_ex creates the QP with
 * ibv_create_qp_ex): the QP is an extended one, whose work request builders
 * (ibv_wr_start, ibv_wr_send, ibv_wr_complete) send. One process connects
 * to itself through one device; the client's QP is made by rdma_create_qp_ex
 * with IBV_QP_EX_WITH_SEND and sends 16 bytes through the builders to the
 * server's, made by rdma_create_qp.
 *
 * Usage: cmqpex ADDR PORT. Prints "ok" and exits 0, or names the failed
 * check and exits 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "cmsteps.h"

/* poll1 waits (at most 20 s) for one completion on cq. */
static void poll1(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 20;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) < end)
		;
	if (n != 1 || wc.status != IBV_WC_SUCCESS) {
		printf("FAIL: %s: %d completions, status %d\n", what, n, n == 1 ? (int)wc.status : -1);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cmqpex ADDR PORT\n");
		return 2;
	}
	struct sockaddr_in sa = ipv4(argv[1], argv[2]);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c;
	listen_and_resolve(ch, &sa, &l, &c);

	struct ibv_pd *pd = ibv_alloc_pd(c->verbs);
	if (!pd)
		fail("ibv_alloc_pd");
	struct ibv_qp_init_attr_ex x;
	memset(&x, 0, sizeof(x));
	x.qp_type = IBV_QPT_RC;
	x.cap.max_send_wr = x.cap.max_recv_wr = 4;
	x.cap.max_send_sge = x.cap.max_recv_sge = 1;
	x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	x.pd = pd;
	x.send_ops_flags = IBV_QP_EX_WITH_SEND;
	if (rdma_create_qp_ex(c, &x))
		fail("rdma_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(c->qp);
	if (!qx || !qx->wr_send) {
		errno = 0;
		fail("the QP of rdma_create_qp_ex has no work request builders");
	}

	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	if (rdma_connect(c, &p))
		fail("rdma_connect");
	struct rdma_cm_event *req = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *s = req->id;
	rdma_ack_cm_event(req);
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (rdma_create_qp(s, pd, &a))
		fail("rdma_create_qp");
	static char buf[2][16];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		fail("ibv_reg_mr");
	struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 16, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *brw;
	if (ibv_post_recv(s->qp, &rw, &brw))
		fail("ibv_post_recv");
	if (rdma_accept(s, &p))
		fail("rdma_accept");
	for (int est = 0; est < 2; est++)
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));

	strcpy(buf[0], "built, not set");
	ibv_wr_start(qx);
	qx->wr_id = 2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf[0], 16);
	if (ibv_wr_complete(qx))
		fail("ibv_wr_complete");
	poll1(s->recv_cq, "the receive");
	poll1(c->send_cq, "the send");
	if (strcmp(buf[1], "built, not set")) {
		printf("FAIL: received \"%.16s\"\n", buf[1]);
		return 1;
	}
	rdma_disconnect(c);
	printf("ok\n");
	return 0;
}
