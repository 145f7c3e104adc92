/* async: asynchronous events as a program uses them. context->async_fd is a
 * real file descriptor (fcntl, poll, epoll, O_NONBLOCK); the engine's events
 * arrive through ibv_get_async_event naming the program's own objects and are
 * acknowledged with ibv_ack_async_event: SRQ limit reached, last WQE reached on
 * a QP of an SRQ that enters the error state, local access violation on a
 * responder that got a bad R_Key. A retry-exceeded send is a completion with
 * IBV_WC_RETRY_EXC_ERR and no event (rxe_comp.c: COMPST_ERROR completes the
 * WQE and moves the QP to error, no event). Destroying a QP drops its unread
 * events. One line per check; every wait is bounded. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "rcconnect.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;
static char buf[8192];
static struct ibv_mr *mr;

static int connect_qp(struct ibv_qp *qp, uint32_t dest, int retry)
{
	struct rc_params p = {.access = IBV_ACCESS_REMOTE_WRITE, .min_rnr_timer = 1,
		.timeout = 14, .retry_cnt = retry, .rnr_retry = 7};
	return rc_connect(qp, dest, gid, p);
}

static struct ibv_qp *new_qp(struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	return ibv_create_qp(pd, &ia);
}

static int send_one(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t rkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
	struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED}, *b;
	w.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	w.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &w, &b);
}

/* wait_wc polls cq (bounded) for a completion of qp and returns its status. */
static int wait_wc(struct ibv_qp *qp)
{
	struct ibv_wc wc;
	time_t t0 = time(NULL);
	while (time(NULL) - t0 < 20) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return -2;
		if (n == 1 && wc.qp_num == qp->qp_num)
			return wc.status;
	}
	return -1;
}

static int readable(int ms)
{
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	return poll(&p, 1, ms);
}

static const char *elem(struct ibv_async_event *e, void *qp, void *srq)
{
	if (qp && e->element.qp == qp)
		return "ours";
	if (srq && e->element.srq == srq)
		return "ours";
	return "other";
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 2;
	ctx = ibv_open_device(l[0]);
	if (!ctx || ibv_query_gid(ctx, 1, 1, &gid))
		return 2;
	int fl = fcntl(ctx->async_fd, F_GETFL);
	printf("async_fd: %s\n", ctx->async_fd >= 0 && fl >= 0 ? "a file descriptor" : "none");
	printf("readable at first: %d\n", readable(0));
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_async_event ev;
	errno = 0;
	int rc = ibv_get_async_event(ctx, &ev);
	printf("non-blocking, no event: rc=%d %s\n", rc, errno == EAGAIN ? "EAGAIN" : strerror(errno));
	fcntl(ctx->async_fd, F_SETFL, fl);

	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_srq_init_attr si = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	struct ibv_qp *a = new_qp(NULL), *b = new_qp(srq);
	if (!pd || !cq || !mr || !srq || !a || !b)
		return 2;
	printf("connect: rc=%d\n", connect_qp(a, b->qp_num, 7) | connect_qp(b, a->qp_num, 7));

	/* SRQ limit: 4 receives, limit 3, two SENDs use two: the count falls
	 * below the limit. Waited for with epoll. */
	struct ibv_sge rs = {.addr = (uintptr_t)buf + 4096, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.sg_list = &rs, .num_sge = 1}, *brw;
	for (int i = 0; i < 4; i++)
		ibv_post_srq_recv(srq, &rw, &brw);
	struct ibv_srq_attr sa = {.srq_limit = 3};
	printf("arm limit: rc=%d\n", ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT));
	send_one(a, IBV_WR_SEND, 0);
	send_one(a, IBV_WR_SEND, 0);
	int ep = epoll_create1(0);
	struct epoll_event ee = {.events = EPOLLIN}, got;
	epoll_ctl(ep, EPOLL_CTL_ADD, ctx->async_fd, &ee);
	printf("epoll: %d\n", epoll_wait(ep, &got, 1, 20000));
	rc = ibv_get_async_event(ctx, &ev);
	printf("event: rc=%d %s srq=%s\n", rc, ibv_event_type_str(ev.event_type), elem(&ev, NULL, srq));
	ibv_ack_async_event(&ev);
	printf("readable after: %d\n", readable(0));

	/* Last WQE reached: the QP of the SRQ enters the error state. Waited for
	 * with poll, read with a blocking ibv_get_async_event. */
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
	printf("b to ERR: rc=%d\n", ibv_modify_qp(b, &qa, IBV_QP_STATE));
	printf("poll: %d\n", readable(20000));
	rc = ibv_get_async_event(ctx, &ev);
	printf("event: rc=%d %s qp=%s\n", rc, ibv_event_type_str(ev.event_type), elem(&ev, b, NULL));
	ibv_ack_async_event(&ev);
	ibv_destroy_qp(a);
	printf("destroy b after ack: rc=%d\n", ibv_destroy_qp(b));

	/* A bad R_Key: the responder's QP gets a local access violation event
	 * (IBTA 9.9.3.1.3 class C; rxe moves the QP to error without one), the
	 * requester the completion IBV_WC_REM_ACCESS_ERR. */
	struct ibv_qp *c = new_qp(NULL), *d = new_qp(NULL);
	connect_qp(c, d->qp_num, 7);
	connect_qp(d, c->qp_num, 7);
	send_one(c, IBV_WR_RDMA_WRITE, mr->rkey ^ 0x3300);
	printf("write with a bad rkey: %s\n", ibv_wc_status_str(wait_wc(c)));
	printf("poll: %d\n", readable(20000));
	rc = ibv_get_async_event(ctx, &ev);
	printf("event: rc=%d %s qp=%s\n", rc, ibv_event_type_str(ev.event_type), elem(&ev, d, NULL));
	ibv_ack_async_event(&ev);
	ibv_destroy_qp(c);
	ibv_destroy_qp(d);

	/* Retry exceeded: a QP whose peer is gone (its QPN destroyed). A
	 * completion, no event. */
	struct ibv_qp *e = new_qp(NULL), *gone = new_qp(NULL);
	uint32_t gone_qpn = gone->qp_num;
	ibv_destroy_qp(gone);
	connect_qp(e, gone_qpn, 1);
	send_one(e, IBV_WR_SEND, 0);
	printf("send to a QP that is gone: %s\n", ibv_wc_status_str(wait_wc(e)));
	printf("readable after: %d\n", readable(0));

	/* An unread event goes with its QP: an SRQ QP to ERR, destroyed before
	 * the event is read. */
	struct ibv_qp *f = new_qp(srq);
	connect_qp(f, e->qp_num, 7);
	ibv_modify_qp(f, &qa, IBV_QP_STATE);
	printf("poll: %d\n", readable(20000));
	printf("destroy with its event unread: rc=%d\n", ibv_destroy_qp(f));
	printf("readable after: %d\n", readable(0));
	ibv_destroy_qp(e);

	rc = ibv_destroy_srq(srq);
	rc |= ibv_destroy_cq(cq);
	rc |= ibv_dereg_mr(mr);
	rc |= ibv_dealloc_pd(pd);
	printf("destroy: %d\n", rc);
	printf("close: %d\n", ibv_close_device(ctx));
	ibv_free_device_list(l);
	return 0;
}
