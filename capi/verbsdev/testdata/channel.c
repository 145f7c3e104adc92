/* channel: completion channels as a program uses them, on one RC QP connected
 * to itself (its own GID and QPN): the channel's fd is a real file descriptor
 * that honours O_NONBLOCK and that poll() watches; ibv_get_cq_event returns the
 * CQ and its context after ibv_req_notify_cq and a completion;
 * ibv_destroy_comp_channel refuses while a CQ uses the channel; destroying a
 * CQ drops its unread events. One line per check. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <infiniband/verbs.h>
#include "rcconnect.h"

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!pd || !ch)
		return 1;
	static int cq_ctx_tag;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, &cq_ctx_tag, ch, 0);
	if (!cq)
		return 1;
	printf("destroy channel in use: %s\n", ibv_destroy_comp_channel(ch) == EBUSY ? "EBUSY" : "other");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	int rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	printf("no event yet: rc=%d %s\n", rc, errno == EAGAIN ? "EAGAIN" : strerror(errno));

	static char buf[2][64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!mr || !qp)
		return 1;
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	rc = rc_connect(qp, qp->qp_num, gid, (struct rc_params){.psn = 7, .min_rnr_timer = 12, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7});
	printf("connected to itself: rc=%d\n", rc);

	printf("req_notify: rc=%d\n", ibv_req_notify_cq(cq, 0));
	struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *brw;
	strcpy(buf[0], "through the wire and back");
	struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED}, *bsw;
	rc = ibv_post_recv(qp, &rw, &brw) | ibv_post_send(qp, &sw, &bsw);
	printf("posted: rc=%d\n", rc);
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	printf("poll: %d\n", poll(&pfd, 1, 10000));
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	printf("event: rc=%d cq=%s context=%s\n", rc, ev_cq == cq ? "ours" : "other", ev_ctx == &cq_ctx_tag ? "ours" : "other");
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc[2];
	int n = 0;
	for (int tries = 0; n < 2 && tries < 10000000; tries++)
		n += ibv_poll_cq(cq, 2 - n, wc + n);
	printf("completions: %d, %s\n", n, n == 2 && !wc[0].status && !wc[1].status ? "success" : "error");
	printf("received: %s\n", buf[1]);

	// Destroying a CQ drops its events nobody read, as the kernel does
	// (ib_uverbs_release_ucq): a second QP on two CQs of the channel, both
	// armed, a message through it; with the two events pending, the send
	// CQ goes: one event is left, the receive CQ's; with that CQ gone too,
	// the channel is not readable.
	struct ibv_cq *scq2 = ibv_create_cq(ctx, 4, NULL, ch, 0), *rcq2 = ibv_create_cq(ctx, 4, &cq_ctx_tag, ch, 0);
	struct ibv_qp_init_attr ia2 = {.send_cq = scq2, .recv_cq = rcq2, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp2 = scq2 && rcq2 ? ibv_create_qp(pd, &ia2) : NULL;
	if (!qp2)
		return 1;
	rc = rc_connect(qp2, qp2->qp_num, gid, (struct rc_params){.psn = 9, .min_rnr_timer = 12, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7});
	rc |= ibv_req_notify_cq(scq2, 0) | ibv_req_notify_cq(rcq2, 0);
	rc |= ibv_post_recv(qp2, &rw, &brw) | ibv_post_send(qp2, &sw, &bsw);
	// Wait up to 10 s for both events: 10 ms at a time whether or not the
	// channel is readable (once the first event is in, poll on the channel
	// returns at once, and 1000 tries went by before the second came).
	int pending = 0;
	for (int tries = 0; pending < 16 && tries < 1000; tries++) {
		ioctl(ch->fd, FIONREAD, &pending);
		if (pending < 16)
			poll(NULL, 0, 10);
	}
	printf("second QP: rc=%d, %d bytes of events pending\n", rc, pending);
	ibv_destroy_qp(qp2);
	ibv_destroy_cq(scq2);
	ioctl(ch->fd, FIONREAD, &pending);
	printf("send CQ destroyed: %d bytes pending\n", pending);
	if (pending == 8) {
		rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
		printf("event: rc=%d cq=%s\n", rc, ev_cq == rcq2 ? "the receive CQ" : "other");
		if (rc == 0)
			ibv_ack_cq_events(rcq2, 1);
	}
	ibv_req_notify_cq(rcq2, 0);
	ibv_poll_cq(rcq2, 2, wc);
	ibv_destroy_cq(rcq2);
	ioctl(ch->fd, FIONREAD, &pending);
	printf("receive CQ destroyed: %d bytes pending, readable %d\n", pending, poll(&pfd, 1, 0));
	int r1 = ibv_destroy_qp(qp);
	int r2 = ibv_dereg_mr(mr);
	int r3 = ibv_destroy_cq(cq);
	int r4 = ibv_destroy_comp_channel(ch);
	printf("destroy: %d %d %d %d\n", r1, r2, r3, r4);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	return 0;
}
