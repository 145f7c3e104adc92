/* pollwait: a program's busy-poll loop on the library sleeps while the
 * device's CQs are empty, and a completion on any CQ of the device wakes it.
 * Run with SOFTRDMA_POLL_SPIN_US=0 and SOFTRDMA_POLL_SLEEP_US given by the
 * test. "idle": ten polls of an empty CQ take at least the eight sleeps they
 * ask for. "wake" (with a sleep of a minute): a poll of a CQ that never gets
 * anything returns as soon as another CQ of the device gets a completion
 * (one RC QP connected to itself, a SEND posted by a second thread 200 ms
 * later), then the receive is polled. "spin" (with SOFTRDMA_POLL_SPIN_US=-1:
 * never sleep): 1000 polls of an empty CQ, then a SEND to itself whose
 * receive is polled until it comes; the test reads how many polls went into
 * the engine from the library's SOFTRDMA_STATS line. "sends N": N inline
 * SENDs of 16 bytes to itself, one at a time (the test compares the Go heap
 * allocations of two counts). "cycles N" (with SOFTRDMA_POLL_SPIN_US=-1):
 * N unsignaled SENDs to itself, one at a time, each receive polled until
 * it comes and the receive CQ polled once more (empty); the test reads how
 * many polls went into the engine. One line per check. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rcconnect.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_qp *qp;
static struct ibv_mr *mr;
static char buf[2][64];

static void *sender(void *arg)
{
	usleep(200000);
	strcpy(buf[0], "through the wire and back");
	struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED}, *bsw;
	if (ibv_post_send(qp, &sw, &bsw))
		printf("post send failed\n");
	return NULL;
}

int main(int argc, char **argv)
{
	int wake = argc > 1 && !strcmp(argv[1], "wake");
	int spin = argc > 1 && !strcmp(argv[1], "spin");
	int sends = argc > 2 && !strcmp(argv[1], "sends") ? atoi(argv[2]) : 0;
	int cycles = argc > 2 && !strcmp(argv[1], "cycles") ? atoi(argv[2]) : 0;
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *idle = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !scq || !rcq || !idle)
		return 1;
	struct ibv_wc wc;
	if (!wake && !spin && !sends && !cycles) {
		double t0 = now();
		int got = 0;
		for (int i = 0; i < 10; i++)
			got += ibv_poll_cq(idle, 1, &wc);
		double dt = now() - t0;
		/* Eight 100 ms sleeps asked for; without them the ten polls take
		 * microseconds. Half of it tells the two apart without depending
		 * on how exactly a loaded host keeps the sleeps (0.744 s was seen
		 * against a former 0.75 s bound). */
		printf("idle polls: %d completions, slept: %s\n", got, dt >= 0.4 ? "yes" : "no");
		if (dt < 0.4)
			printf("(took %.3f s)\n", dt);
		return 0;
	}

	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	qp = ibv_create_qp(pd, &ia);
	if (!mr || !qp)
		return 1;
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	int rc = rc_connect(qp, qp->qp_num, gid, (struct rc_params){.psn = 7, .min_rnr_timer = 12, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7});
	struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *brw;
	rc |= ibv_post_recv(qp, &rw, &brw);
	printf("connected to itself: rc=%d\n", rc);

	if (sends) {
		// N inline SENDs of 16 bytes to itself, one at a time.
		struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 16, .lkey = mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE}, *bsw;
		int ok = 0;
		for (int i = 0; i < sends; i++) {
			if (i > 0 && ibv_post_recv(qp, &rw, &brw))
				break;
			snprintf(buf[0], 16, "message %d", i);
			if (ibv_post_send(qp, &sw, &bsw))
				break;
			int got = 0;
			while (got < 2) {
				int n = ibv_poll_cq(got == 0 ? rcq : scq, 1, &wc);
				if (n < 0 || (n == 1 && wc.status))
					break;
				got += n;
			}
			if (got < 2)
				break;
			ok += strcmp(buf[1], buf[0]) == 0;
		}
		printf("sent inline and received: %d of %d\n", ok, sends);
		return 0;
	}
	if (cycles) {
		struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 16, .lkey = mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND}, *bsw;
		int ok = 0;
		for (int i = 0; i < cycles; i++) {
			if (i > 0 && ibv_post_recv(qp, &rw, &brw))
				break;
			if (ibv_post_send(qp, &sw, &bsw))
				break;
			int n = 0;
			while (n == 0)
				n = ibv_poll_cq(rcq, 1, &wc);
			if (n != 1 || wc.status)
				break;
			ok += ibv_poll_cq(rcq, 1, &wc) == 0;
		}
		printf("cycles: %d of %d\n", ok, cycles);
		return 0;
	}
	if (spin) {
		int got = 0;
		for (int i = 0; i < 1000; i++)
			got += ibv_poll_cq(idle, 1, &wc);
		printf("spun: %d completions\n", got);
		sender(NULL);
		int n = 0;
		while (n == 0)
			n = ibv_poll_cq(rcq, 1, &wc);
		printf("received: %s, %s\n", n == 1 && !wc.status ? "success" : "error", buf[1]);
		return 0;
	}

	pthread_t t;
	pthread_create(&t, NULL, sender, NULL);
	double t0 = now();
	int got = 0;
	for (int i = 0; i < 3; i++) // idle from the first; the third sleeps
		got += ibv_poll_cq(idle, 1, &wc);
	double dt = now() - t0;
	printf("a completion on another CQ woke the poll: %s, %d completions on the idle CQ\n", dt < 30 ? "yes" : "no", got);
	int n = 0;
	for (int i = 0; n == 0 && i < 1000000; i++)
		n = ibv_poll_cq(rcq, 1, &wc);
	printf("received: %s, %s\n", n == 1 && !wc.status ? "success" : "error", buf[1]);
	pthread_join(t, NULL);
	for (n = 0; n == 0;)
		n = ibv_poll_cq(scq, 1, &wc);
	printf("sent: %s\n", n == 1 && !wc.status ? "success" : "error");
	return 0;
}
