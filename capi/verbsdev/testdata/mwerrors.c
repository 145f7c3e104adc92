/* mwerrors: memory window verbs refused as on rxe. Synchronously: a window
 * of type 3 (EINVAL); ibv_bind_mw of a type 2 window or of a range without a
 * region (EINVAL) and to a region of another PD (EPERM), which verbs.h's
 * inline refuses itself, and zero-based (EINVAL, as rxe's provider); a BIND_MW
 * work request with an SGE (EINVAL, *bad_wr the WR); ibv_dealloc_pd while a
 * window lives (EBUSY). At completion, on a QP connected to itself (the error
 * moves it to IBV_QPS_ERR, so each case takes a new one): a bind to a region
 * without IBV_ACCESS_MW_BIND, a type 2 bind on a QP of another PD, a type 2
 * bind of length 0 and a second bind of a bound type 2 window complete with
 * IBV_WC_MW_BIND_ERR; IBV_WR_LOCAL_INV of a type 1 window's key with
 * IBV_WC_LOC_QP_OP_ERR, and of a bound type 2 window succeeds
 * (IBV_WC_LOCAL_INV). On a device without windows (siw's iWARP), ibv_alloc_mw
 * is EOPNOTSUPP and nothing else runs. One line per check (checks.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "checks.h"
#include "rcconnect.h"

/* INLINE(name, want, call): a refusal of verbs.h's inline ibv_bind_mw, which
 * never calls the library, so no "softrdma: " line says why. */
#define INLINE(name, want, call)                                                                  \
	do {                                                                                      \
		mark(name, 0);                                                                    \
		expect(name, (call), want);                                                       \
	} while (0)

static char buf[4096];
static struct ibv_context *ctx;
static struct ibv_cq *cq;
static union ibv_gid gid;

/* newqp makes an RC QP of pd connected to itself. */
static struct ibv_qp *newqp(struct ibv_pd *pd)
{
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	struct rc_params p = {.access = IBV_ACCESS_REMOTE_WRITE, .psn = 1, .min_rnr_timer = 12, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7};
	if (!qp || rc_connect(qp, qp->qp_num, gid, p)) {
		printf("BAD new qp\n");
		exit(1);
	}
	return qp;
}

/* wc waits (bounded) for one completion and returns its status, or -1. */
static int wc(enum ibv_wc_opcode *op)
{
	struct ibv_wc w;
	for (int i = 0; i < 2000000; i++) {
		int n = ibv_poll_cq(cq, 1, &w);
		if (n == 1) {
			if (op)
				*op = w.opcode;
			return w.status;
		}
		if (n < 0)
			return -1;
		if (i > 1000)
			usleep(50);
	}
	return -1;
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

/* bind2 posts a BIND_MW work request binding mw to len bytes of mr. */
static int bind2(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t len)
{
	struct ibv_send_wr wr = {.wr_id = 2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = (uintptr_t)buf, .length = len,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	return ibv_post_send(qp, &wr, &bad);
}

static int local_inv(struct ibv_qp *qp, uint32_t key)
{
	struct ibv_send_wr wr = {.wr_id = 3, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.invalidate_rkey = key;
	return ibv_post_send(qp, &wr, &bad);
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 1;
	ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !pd2 || !cq)
		return 1;
	struct ibv_mw *mw;
	if (l[0]->transport_type == IBV_TRANSPORT_IWARP) {
		mark("alloc mw on iwarp", 1);
		errno = 0;
		mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
		expect("alloc mw on iwarp", mw == NULL, 1);
		expect("alloc mw on iwarp errno", errno, EOPNOTSUPP);
		printf("checks: %d, bad: %d\n", total, bad);
		return bad != 0;
	}
	if (ibv_query_gid(ctx, 1, 1, &gid))
		return 1;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mr *nobind = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr2 = ibv_reg_mr(pd2, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1), *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mr || !nobind || !mr2 || !mw1 || !mw2)
		return 1;
	expect("type 1 and type 2 keys differ", mw1->rkey != mw2->rkey, 1);

	mark("alloc mw type 3", 1);
	errno = 0;
	mw = ibv_alloc_mw(pd, 3);
	expect("alloc mw type 3", mw == NULL, 1);
	expect("alloc mw type 3 errno", errno, EINVAL);

	struct ibv_qp *qp = newqp(pd);
	uint32_t key1 = mw1->rkey;
	struct ibv_mw_bind b = {.wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = {.mr = mr, .addr = (uintptr_t)buf, .length = 64, .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	INLINE("ibv_bind_mw of a type 2 window", EINVAL, ibv_bind_mw(qp, mw2, &b));
	b.bind_info.mr = NULL;
	INLINE("ibv_bind_mw of a range without a region", EINVAL, ibv_bind_mw(qp, mw1, &b));
	b.bind_info.mr = mr;
	b.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
	RC("ibv_bind_mw zero-based", EINVAL, ibv_bind_mw(qp, mw1, &b));
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	b.bind_info.mr = mr2;
	INLINE("ibv_bind_mw to a region of another PD", EPERM, ibv_bind_mw(qp, mw1, &b));
	expect("refused binds kept the key", mw1->rkey == key1, 1);

	struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 4, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_BIND_MW}, *bad_wr = NULL;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = (uintptr_t)buf, .length = 64};
	RC("BIND_MW with an SGE", EINVAL, ibv_post_send(qp, &wr, &bad_wr));
	expect("BIND_MW with an SGE: bad_wr", bad_wr == &wr, 1);

	struct ibv_pd *pd4 = ibv_alloc_pd(ctx);
	struct ibv_mw *mw4 = pd4 ? ibv_alloc_mw(pd4, IBV_MW_TYPE_2) : NULL;
	if (!mw4)
		return 1;
	RC("ibv_dealloc_pd with a window", EBUSY, ibv_dealloc_pd(pd4));
	RC("ibv_dealloc_mw", 0, ibv_dealloc_mw(mw4));
	RC("ibv_dealloc_pd after its window", 0, ibv_dealloc_pd(pd4));
	enum ibv_wc_opcode op = 0;

	/* Completions: each failure moves the QP to ERR. */
	b.bind_info.mr = nobind;
	uint32_t before = mw1->rkey;
	RC("ibv_bind_mw to a region without MW_BIND posts", 0, ibv_bind_mw(qp, mw1, &b));
	expect("ibv_bind_mw to a region without MW_BIND", wc(NULL), IBV_WC_MW_BIND_ERR);
	expect("bind error: QP state", qp_state(qp), IBV_QPS_ERR);
	mw1->rkey = before; /* rdma-core: the program undoes the key of a failed bind */

	struct ibv_pd *pd3 = ibv_alloc_pd(ctx);
	struct ibv_qp *other = newqp(pd3);
	RC("type 2 bind on a QP of another PD posts", 0, bind2(other, mw2, mr, 64));
	expect("type 2 bind on a QP of another PD", wc(NULL), IBV_WC_MW_BIND_ERR);

	qp = newqp(pd);
	RC("type 2 bind of length 0 posts", 0, bind2(qp, mw2, mr, 0));
	expect("type 2 bind of length 0", wc(NULL), IBV_WC_MW_BIND_ERR);

	qp = newqp(pd);
	b.bind_info.mr = mr;
	RC("type 1 bind", 0, ibv_bind_mw(qp, mw1, &b));
	expect("type 1 bind", wc(&op), IBV_WC_SUCCESS);
	expect("type 1 bind opcode", op, IBV_WC_BIND_MW);
	RC("LOCAL_INV of a type 1 window posts", 0, local_inv(qp, mw1->rkey));
	expect("LOCAL_INV of a type 1 window", wc(NULL), IBV_WC_LOC_QP_OP_ERR);

	qp = newqp(pd);
	uint32_t k2 = ibv_inc_rkey(mw2->rkey);
	RC("type 2 bind", 0, bind2(qp, mw2, mr, 64));
	expect("type 2 bind", wc(&op), IBV_WC_SUCCESS);
	expect("type 2 bind opcode", op, IBV_WC_BIND_MW);
	RC("LOCAL_INV of a bound type 2 window", 0, local_inv(qp, k2));
	expect("LOCAL_INV of a bound type 2 window", wc(&op), IBV_WC_SUCCESS);
	expect("LOCAL_INV opcode", op, IBV_WC_LOCAL_INV);
	mw2->rkey = k2;
	RC("type 2 bind again", 0, bind2(qp, mw2, mr, 64));
	expect("type 2 bind again", wc(NULL), IBV_WC_SUCCESS);
	RC("type 2 bind of a bound window posts", 0, bind2(qp, mw2, mr, 64));
	expect("type 2 bind of a bound window", wc(NULL), IBV_WC_MW_BIND_ERR);

	RC("ibv_dealloc_mw type 1", 0, ibv_dealloc_mw(mw1));
	RC("ibv_dealloc_mw type 2", 0, ibv_dealloc_mw(mw2));
	printf("checks: %d, bad: %d\n", total, bad);
	return bad != 0;
}
