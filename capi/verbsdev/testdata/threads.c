/* threads MODE: threads post and poll on one RC QP pair (a sends, b receives)
 * and its CQs at once; libibverbs's post and poll verbs are thread-safe (rdma-core's
 * rxe provider takes the queue's spinlock in rxe_post_send, rxe_post_recv and
 * rxe_poll_cq; rxe's wr_start takes it until wr_complete, as ibv_wr_post(3)
 * asks of a provider). MODE says which verb gets THREADS threads, the others
 * one each: send (ibv_post_send on a), wr (ibv_wr_start, ibv_wr_send,
 * ibv_wr_set_sge, ibv_wr_complete on a, made with ibv_create_qp_ex), recv
 * (ibv_post_recv on b), poll (ibv_poll_cq on each CQ), pollex (ibv_start_poll,
 * ibv_next_poll, ibv_end_poll on each CQ, made with ibv_create_cq_ex: rxe's
 * start_poll takes the CQ's lock until end_poll). Every WR must complete exactly once, successfully; the program
 * prints the counts and gives up on polling after 60 s (a lost completion). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "rcconnect.h"

#define THREADS 4
#define TOTAL 12000
#define INFLIGHT 256 /* posted and not yet polled, per CQ (of 512) */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char *buf;
static struct ibv_cq *acq, *bcq;
static struct ibv_cq_ex *acqx, *bcqx; /* mode pollex: the extended CQs */
static struct ibv_qp *a, *b;
static struct ibv_qp_ex *ax; /* a's extended QP (mode wr), or NULL */
static unsigned char seen_send[TOTAL], seen_recv[TOTAL];
static int bad_status, bad_id, post_err;
static int done_send, done_recv;
static int next_send, next_recv; /* the next wr_id to post */

static void *sender(void *arg)
{
	int t = (int)(intptr_t)arg, i;
	while ((i = __atomic_fetch_add(&next_send, 1, __ATOMIC_RELAXED)) < TOTAL) {
		/* A WQE's slot is free once it completes, polled or not: the
		 * program keeps what it has posted and not polled within its CQ
		 * (an overrun CQ loses completions, on rxe as here). */
		while (i - __atomic_load_n(&done_send, __ATOMIC_RELAXED) >= INFLIGHT)
			sched_yield();
		struct ibv_sge s = {.addr = (uintptr_t)buf + t * 64, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1,
			.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bw;
		int rc;
		if (ax) {
			do {
				ibv_wr_start(ax);
				ax->wr_id = (uint64_t)i;
				ax->wr_flags = IBV_SEND_SIGNALED;
				ibv_wr_send(ax);
				ibv_wr_set_sge(ax, s.lkey, s.addr, s.length);
			} while ((rc = ibv_wr_complete(ax)) == ENOMEM && !sched_yield());
		} else {
			while ((rc = ibv_post_send(a, &w, &bw)) == ENOMEM)
				sched_yield(); /* the queue is full: let the others run */
		}
		if (rc)
			__atomic_add_fetch(&post_err, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *receiver(void *arg)
{
	int t = (int)(intptr_t)arg, i;
	while ((i = __atomic_fetch_add(&next_recv, 1, __ATOMIC_RELAXED)) < TOTAL) {
		while (i - __atomic_load_n(&done_recv, __ATOMIC_RELAXED) >= INFLIGHT)
			sched_yield();
		struct ibv_sge s = {.addr = (uintptr_t)buf + 4096 + t * 64, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bw;
		int rc;
		while ((rc = ibv_post_recv(b, &w, &bw)) == ENOMEM)
			sched_yield();
		if (rc)
			__atomic_add_fetch(&post_err, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *poller(void *arg)
{
	int recv = (int)(intptr_t)arg;
	struct ibv_cq *cq = recv ? bcq : acq;
	unsigned char *seen = recv ? seen_recv : seen_send;
	int *done = recv ? &done_recv : &done_send;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct ibv_cq_ex *cqx = recv ? bcqx : acqx;
	while (__atomic_load_n(done, __ATOMIC_RELAXED) < TOTAL) {
		struct ibv_wc wc[8];
		int n = 0;
		if (cqx) {
			struct ibv_poll_cq_attr pa = {0};
			if (!ibv_start_poll(cqx, &pa)) {
				do {
					/* A program may work between the poll and its reads:
					 * the completion stays its own until ibv_end_poll. */
					sched_yield();
					wc[n].wr_id = cqx->wr_id;
					wc[n].status = cqx->status;
					n++;
				} while (n < 8 && !ibv_next_poll(cqx));
				ibv_end_poll(cqx);
			}
		} else {
			n = ibv_poll_cq(cq, 8, wc);
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				__atomic_add_fetch(&bad_status, 1, __ATOMIC_RELAXED);
			if (wc[i].wr_id >= TOTAL)
				__atomic_add_fetch(&bad_id, 1, __ATOMIC_RELAXED);
			else
				__atomic_add_fetch(&seen[wc[i].wr_id], 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(done, 1, __ATOMIC_RELAXED);
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 60)
			break;
	}
	return NULL;
}

static int count(unsigned char *seen, int v)
{
	int n = 0;
	for (int i = 0; i < TOTAL; i++)
		n += seen[i] == v;
	return n;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int ns = 1, nr = 1, np = 1;
	if (!strcmp(mode, "send") || !strcmp(mode, "wr"))
		ns = THREADS;
	else if (!strcmp(mode, "recv"))
		nr = THREADS;
	else if (!strcmp(mode, "poll") || !strcmp(mode, "pollex"))
		np = THREADS;
	else {
		fprintf(stderr, "usage: threads send|wr|recv|poll|pollex\n");
		return 2;
	}
	struct ibv_device **l = ibv_get_device_list(NULL);
	union ibv_gid gid;
	if (!l || !l[0] || !(ctx = ibv_open_device(l[0])) || ibv_query_gid(ctx, 1, 1, &gid))
		return 2;
	pd = ibv_alloc_pd(ctx);
	buf = aligned_alloc(4096, 8192);
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	if (!strcmp(mode, "pollex")) {
		struct ibv_cq_init_attr_ex ca = {.cqe = 512, .wc_flags = IBV_WC_STANDARD_FLAGS};
		acqx = ibv_create_cq_ex(ctx, &ca);
		bcqx = ibv_create_cq_ex(ctx, &ca);
		acq = acqx ? ibv_cq_ex_to_cq(acqx) : NULL;
		bcq = bcqx ? ibv_cq_ex_to_cq(bcqx) : NULL;
	} else {
		acq = ibv_create_cq(ctx, 512, NULL, NULL, 0);
		bcq = ibv_create_cq(ctx, 512, NULL, NULL, 0);
	}
	struct ibv_qp_init_attr ia = {.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
	ia.send_cq = ia.recv_cq = acq;
	if (!strcmp(mode, "wr")) {
		struct ibv_qp_init_attr_ex x = {.send_cq = acq, .recv_cq = acq, .cap = ia.cap, .qp_type = IBV_QPT_RC,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_SEND};
		a = ibv_create_qp_ex(ctx, &x);
		if (!a || !(ax = ibv_qp_to_qp_ex(a)))
			return 2;
	} else {
		a = ibv_create_qp(pd, &ia);
	}
	ia.send_cq = ia.recv_cq = bcq;
	b = ibv_create_qp(pd, &ia);
	if (!pd || !mr || !acq || !bcq || !a || !b)
		return 2;
	struct rc_params p = {.access = IBV_ACCESS_LOCAL_WRITE, .psn = 1, .min_rnr_timer = 1, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7};
	if (rc_connect(a, b->qp_num, gid, p) || rc_connect(b, a->qp_num, gid, p))
		return 2;
	pthread_t th[4 * THREADS];
	int n = 0;
	for (int i = 0; i < ns; i++)
		pthread_create(&th[n++], NULL, sender, (void *)(intptr_t)i);
	for (int i = 0; i < nr; i++)
		pthread_create(&th[n++], NULL, receiver, (void *)(intptr_t)i);
	for (int i = 0; i < np; i++) {
		pthread_create(&th[n++], NULL, poller, (void *)(intptr_t)0);
		pthread_create(&th[n++], NULL, poller, (void *)(intptr_t)1);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	printf("post errors: %d\n", post_err);
	printf("sends completed once: %d of %d (twice or more: %d)\n", count(seen_send, 1), TOTAL, TOTAL - count(seen_send, 1) - count(seen_send, 0));
	printf("recvs completed once: %d of %d (twice or more: %d)\n", count(seen_recv, 1), TOTAL, TOTAL - count(seen_recv, 1) - count(seen_recv, 0));
	printf("bad status: %d, unknown wr_id: %d\n", bad_status, bad_id);
	return 0;
}
