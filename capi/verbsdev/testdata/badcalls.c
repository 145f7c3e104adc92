/* badcalls: hostile and wrong argument sets through the verbs API, each checked
 * against what libibverbs returns on the kernel's rxe (rdma-core v44's
 * providers/rxe/rxe.c and libibverbs, Linux's drivers/infiniband/sw/rxe and
 * core/uverbs_cmd.c; each case cites where its answer comes from). One line
 * per check on stdout, "ok NAME: GOT" or "BAD NAME: got GOT want WANT"; before
 * each call a line "== NAME" on stderr, with " (allowed)" when the call is
 * expected to succeed, so that a test can see that every refused verb said why
 * under SOFTRDMA_DEBUG=1. Exits 0 when every check passed. No check may crash
 * the process or hang: the test bounds it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "rcconnect.h"

#include "checks.h"

static struct ibv_context *ctx;
static struct ibv_device_attr dev;
static union ibv_gid gid;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static struct ibv_qp *new_qp(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = 64}};
	return ibv_create_qp(pd, &ia);
}

/* connect moves qp to RTS towards the QP numbered dest on this device, with the
 * given RNR retry count and remote access. */
static int connect_qp(struct ibv_qp *qp, uint32_t dest, int rnr_retry)
{
	struct rc_params p = {.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		.psn = 100, .min_rnr_timer = 1, .timeout = 14, .retry_cnt = 7, .rnr_retry = rnr_retry};
	return rc_connect(qp, dest, gid, p);
}

/* A connected pair: a sends, b receives, each with its own CQ. */
struct pair {
	struct ibv_cq *acq, *bcq;
	struct ibv_qp *a, *b;
};

static int new_pair(struct pair *p, int rnr_retry)
{
	p->acq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	p->bcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!p->acq || !p->bcq)
		return -1;
	p->a = new_qp(p->acq, p->acq);
	p->b = new_qp(p->bcq, p->bcq);
	if (!p->a || !p->b)
		return -1;
	return connect_qp(p->a, p->b->qp_num, rnr_retry) | connect_qp(p->b, p->a->qp_num, 7);
}

static void free_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->acq);
	ibv_destroy_cq(p->bcq);
}

static char *buf;	       /* 64 KiB, registered as mr (all access) */
static struct ibv_mr *mr;      /* all access */
static struct ibv_mr *mr_ro;   /* buf + 32 KiB, 4 KiB, local write and remote read only */

/* post_one posts one send WR (one SGE over buf) on qp. */
static int post_one(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t lkey, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED}, *b;
	w.wr.rdma.remote_addr = raddr;
	w.wr.rdma.rkey = rkey;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		w.wr.atomic.remote_addr = raddr;
		w.wr.atomic.rkey = rkey;
		w.wr.atomic.compare_add = 1;
	}
	return ibv_post_send(qp, &w, &b);
}

static int post_recv_one(struct ibv_qp *qp, uint32_t lkey, uint32_t len, char *at)
{
	struct ibv_sge s = {.addr = (uintptr_t)at, .length = len, .lkey = lkey};
	struct ibv_recv_wr w = {.wr_id = 9, .sg_list = &s, .num_sge = 1}, *b;
	return ibv_post_recv(qp, &w, &b);
}

/* wc_case runs one transfer on a fresh pair and checks the completion status
 * on the sender (and on the receiver, when recv_want >= 0). */
static void wc_case(const char *name, enum ibv_wr_opcode op, uint32_t lkey, uint32_t len, uint64_t raddr,
		    uint32_t rkey, int recv_len, int send_want, int recv_want, int rnr_retry)
{
	struct pair p;
	struct ibv_wc wc;
	char n[128];
	if (new_pair(&p, rnr_retry)) {
		expect(name, -100, 0);
		return;
	}
	if (recv_len >= 0)
		post_recv_one(p.b, mr->lkey, (uint32_t)recv_len, buf + 16384);
	snprintf(n, sizeof(n), "%s: post", name);
	RC(n, 0, post_one(p.a, op, lkey, len, raddr, rkey));
	snprintf(n, sizeof(n), "%s: sender status", name);
	mark(n, 0);
	expect(n, poll1(p.acq, &wc), send_want);
	if (recv_want >= 0) {
		snprintf(n, sizeof(n), "%s: receiver status", name);
		mark(n, 0);
		expect(n, poll1(p.bcq, &wc), recv_want);
	}
	free_pair(&p);
}

int main(void)
{
	/* ibv_get_device_list tolerates a NULL count (libibverbs/device.c). */
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0]) {
		printf("no device\n");
		return 2;
	}
	ctx = ibv_open_device(l[0]);
	if (!ctx || ibv_query_device(ctx, &dev) || ibv_query_gid(ctx, 1, 1, &gid))
		return 2;
	struct ibv_port_attr pa;

	/* Ports: ib_uverbs_query_port -> ib_query_port: rdma_is_port_valid, -EINVAL. */
	RC("query_port 0", EINVAL, ibv_query_port(ctx, 0, &pa));
	RC("query_port 2", EINVAL, ibv_query_port(ctx, 2, &pa));
	/* ibv_query_gid (libibverbs/verbs.c): an empty entry is 0 with a zero GID,
	 * an index outside the table is -1. */
	union ibv_gid g;
	memset(&g, 0xff, sizeof(g));
	RC("query_gid empty entry", 0, ibv_query_gid(ctx, 1, 100, &g));
	expect("query_gid empty entry is zero", g.global.interface_id | g.global.subnet_prefix, 0);
	RC("query_gid outside the table", -1, ibv_query_gid(ctx, 1, 1 << 20, &g));
	RC("query_gid port 9", -1, ibv_query_gid(ctx, 9, 0, &g));

	OBJ("alloc_pd", 0, ibv_alloc_pd(ctx));
	pd = obj_;
	if (!pd)
		return 2;

	/* Memory regions. ib_check_mr_access (include/rdma/ib_verbs.h): remote
	 * write or atomic without local write, or a bit outside
	 * IB_ACCESS_SUPPORTED, is -EINVAL. */
	buf = aligned_alloc(4096, 65536);
	memset(buf, 0, 65536);
	OBJ("reg_mr remote write without local write", EINVAL, ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE));
	OBJ("reg_mr remote atomic without local write", EINVAL, ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_ATOMIC));
	OBJ("reg_mr unknown access bit 1<<15", EINVAL, ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | (1 << 15)));
	/* ib_umem_get (drivers/infiniband/core/umem.c): pinning address 0
	 * fails, -EFAULT; a length of 0 is no pages, -EINVAL. */
	OBJ("reg_mr NULL address", EFAULT, ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE));
	OBJ("reg_mr length 0", EINVAL, ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE));
	OBJ("reg_mr", 0, ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
	mr = obj_;
	OBJ("reg_mr read only", 0, ibv_reg_mr(pd, buf + 32768, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
	mr_ro = obj_;
	if (!mr || !mr_ro)
		return 2;

	/* Completion queues. rxe_cq_chk_attr (rxe_cq.c): cqe <= 0 or above
	 * max_cqe is -EINVAL; ib_uverbs_create_cq: comp_vector >=
	 * num_comp_vectors is -EINVAL. */
	OBJ("create_cq cqe 0", EINVAL, ibv_create_cq(ctx, 0, NULL, NULL, 0));
	OBJ("create_cq cqe -1", EINVAL, ibv_create_cq(ctx, -1, NULL, NULL, 0));
	OBJ("create_cq cqe max_cqe+1", EINVAL, ibv_create_cq(ctx, dev.max_cqe + 1, NULL, NULL, 0));
	OBJ("create_cq comp_vector", EINVAL, ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors));
	OBJ("create_cq", 0, ibv_create_cq(ctx, 64, NULL, NULL, 0));
	cq = obj_;
	if (!cq)
		return 2;

	/* Queue pairs. rxe_qp_chk_cap (rxe_qp.c): a capability above the
	 * device's is -EINVAL; rxe_qp_chk_init: a type other than RC, UC, UD,
	 * GSI is -EOPNOTSUPP. */
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp_init_attr b = ia;
	b.cap.max_send_wr = dev.max_qp_wr + 1;
	OBJ("create_qp max_send_wr beyond max_qp_wr", EINVAL, ibv_create_qp(pd, &b));
	b = ia;
	b.cap.max_recv_wr = dev.max_qp_wr + 1;
	OBJ("create_qp max_recv_wr beyond max_qp_wr", EINVAL, ibv_create_qp(pd, &b));
	b = ia;
	b.cap.max_send_sge = dev.max_sge + 1;
	OBJ("create_qp max_send_sge beyond max_sge", EINVAL, ibv_create_qp(pd, &b));
	b = ia;
	b.cap.max_recv_sge = dev.max_sge + 1;
	OBJ("create_qp max_recv_sge beyond max_sge", EINVAL, ibv_create_qp(pd, &b));
	b = ia;
	b.cap.max_inline_data = 1 << 20;
	OBJ("create_qp max_inline_data 1 MiB", EINVAL, ibv_create_qp(pd, &b));
	b = ia;
	b.qp_type = 99;
	OBJ("create_qp type 99", EOPNOTSUPP, ibv_create_qp(pd, &b));
	/* rdma-core would dereference a NULL CQ; rxe_qp_chk_init says "missing
	 * cq", -EINVAL: no crash here. */
	b = ia;
	b.send_cq = NULL;
	OBJ("create_qp without a send CQ", EINVAL, ibv_create_qp(pd, &b));
	OBJ("create_qp", 0, ibv_create_qp(pd, &ia));
	struct ibv_qp *qp = obj_;
	if (!qp)
		return 2;

	/* Posting in RESET. rxe_post_recv (rdma-core rxe.c, C10-97.2.1):
	 * EINVAL; rxe_post_send: the doorbell fails in rxe_post_send
	 * (rxe_verbs.c: requester not ready), EINVAL. */
	struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &sg, .num_sge = 1}, *brw;
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND}, *bsw;
	RC("post_recv in RESET", EINVAL, ibv_post_recv(qp, &rw, &brw));
	RC("post_send in RESET", EINVAL, ibv_post_send(qp, &sw, &bsw));

	/* Transitions and masks. ib_modify_qp_is_ok (core/verbs.c): a
	 * transition not in the table, a missing required attribute or one not
	 * allowed is -EINVAL; uverbs_cmd.c modify_qp: a state above IB_QPS_ERR
	 * is -EINVAL; ibv_cmd_modify_qp (libibverbs/cmd.c): a mask bit from
	 * IBV_QP_RATE_LIMIT up is EOPNOTSUPP. */
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS};
	RC("modify_qp RESET to RTS", EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1};
	RC("modify_qp RESET to INIT without the port", EINVAL,
	   ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS));
	RC("modify_qp RESET to INIT with sq_psn", EINVAL,
	   ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN));
	a.qp_state = 42;
	RC("modify_qp state 42", EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_INIT;
	RC("modify_qp mask bit 1<<25", EOPNOTSUPP,
	   ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | (1 << 25)));
	/* rxe_qp_chk_attr: port not valid, -EINVAL. */
	a.port_num = 2;
	RC("modify_qp port 2", EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	a.port_num = 1;
	RC("modify_qp RESET to INIT", 0, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	/* rxe_post_recv: INIT is not RESET, the receive is queued. */
	RC("post_recv in INIT", 0, ibv_post_recv(qp, &rw, &brw));
	RC("post_send in INIT", EINVAL, ibv_post_send(qp, &sw, &bsw));
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp->qp_num,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}}};
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	RC("modify_qp INIT to RTR without the address", EINVAL, ibv_modify_qp(qp, &a, rtr & ~IBV_QP_AV));
	/* rxe_qp_chk_attr: path_mtu above the port's max_mtu, -EINVAL. */
	a.path_mtu = 7;
	RC("modify_qp path_mtu 7", EINVAL, ibv_modify_qp(qp, &a, rtr));
	a.path_mtu = IBV_MTU_1024;
	RC("modify_qp INIT to RTR", 0, ibv_modify_qp(qp, &a, rtr));
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 40, .retry_cnt = 1, .rnr_retry = 1, .max_rd_atomic = 1};
	int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	/* rxe_qp_chk_attr: timeout above 31, max_rd_atomic above max_qp_rd_atom: -EINVAL. */
	RC("modify_qp timeout 40", EINVAL, ibv_modify_qp(qp, &a, rts));
	a.timeout = 8;
	a.max_rd_atomic = dev.max_qp_rd_atom + 1;
	RC("modify_qp max_rd_atomic beyond max_qp_rd_atom", EINVAL, ibv_modify_qp(qp, &a, rts));
	a.max_rd_atomic = 1;
	RC("modify_qp RTR to RTS", 0, ibv_modify_qp(qp, &a, rts));

	/* Posting in RTS (the QP is connected to itself). rxe_post_send
	 * (rdma-core rxe.c): a NULL bad_wr or WR list is EINVAL; validate_send_wr:
	 * more SGEs than max_send_sge, an atomic shorter than 8 bytes or at an
	 * address not 8-aligned, inline data above max_inline: EINVAL, the WR in
	 * *bad_wr. rxe_post_one_recv: more SGEs than max_recv_sge EINVAL, a full
	 * queue ENOMEM. */
	RC("post_send NULL bad_wr", EINVAL, ibv_post_send(qp, &sw, NULL));
	RC("post_send NULL list", EINVAL, ibv_post_send(qp, NULL, &bsw));
	RC("post_recv NULL bad_wr", EINVAL, ibv_post_recv(qp, &rw, NULL));
	RC("post_recv NULL list", EINVAL, ibv_post_recv(qp, NULL, &brw));
	struct ibv_sge sgs[64];
	for (int i = 0; i < 64; i++)
		sgs[i] = sg;
	struct ibv_send_wr w2 = sw;
	w2.sg_list = sgs;
	w2.num_sge = (int)ia.cap.max_send_sge + 1;
	bsw = NULL;
	RC("post_send num_sge beyond max_send_sge", EINVAL, ibv_post_send(qp, &w2, &bsw));
	expect("post_send num_sge beyond max_send_sge: bad_wr", bsw == &w2, 1);
	struct ibv_recv_wr r2 = rw;
	r2.sg_list = sgs;
	r2.num_sge = (int)ia.cap.max_recv_sge + 1;
	brw = NULL;
	RC("post_recv num_sge beyond max_recv_sge", EINVAL, ibv_post_recv(qp, &r2, &brw));
	expect("post_recv num_sge beyond max_recv_sge: bad_wr", brw == &r2, 1);
	w2 = sw;
	w2.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	w2.wr.atomic.remote_addr = (uintptr_t)buf + 4;
	w2.wr.atomic.rkey = mr->rkey;
	RC("post_send atomic at an unaligned address", EINVAL, ibv_post_send(qp, &w2, &bsw));
	w2.wr.atomic.remote_addr = (uintptr_t)buf;
	struct ibv_sge s4 = {.addr = (uintptr_t)buf, .length = 4, .lkey = mr->lkey};
	w2.sg_list = &s4;
	RC("post_send atomic of 4 bytes", EINVAL, ibv_post_send(qp, &w2, &bsw));
	w2 = sw;
	struct ibv_sge big = {.addr = (uintptr_t)buf, .length = 4096, .lkey = 0};
	w2.sg_list = &big;
	w2.send_flags = IBV_SEND_INLINE;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(qp, &qa, IBV_QP_CAP, &qi);
	big.length = qi.cap.max_inline_data + 1;
	RC("post_send inline beyond max_inline_data", EINVAL, ibv_post_send(qp, &w2, &bsw));
	struct ibv_recv_wr rl[16];
	for (int i = 0; i < 16; i++) {
		rl[i] = rw;
		rl[i].next = i < 15 ? &rl[i + 1] : NULL;
	}
	brw = NULL;
	/* One receive is already queued (posted in INIT): the first WR beyond
	 * the queue is at index max_recv_wr - 1. */
	int room = (int)qi.cap.max_recv_wr - 1;
	if (room < 0 || room >= 16) {
		printf("max_recv_wr %u: the list does not overrun it\n", qi.cap.max_recv_wr);
		return 2;
	}
	RC("post_recv beyond the queue", ENOMEM, ibv_post_recv(qp, rl, &brw));
	expect("post_recv beyond the queue: bad_wr is the first beyond", brw == &rl[room], 1);

	/* Destroying what is in use. uverbs_free_pd/cq/srq (core
	 * uverbs_std_types*.c): ib_destroy_usecnt, -EBUSY while used. */
	RC("dealloc_pd with MRs and QPs", EBUSY, ibv_dealloc_pd(pd));
	RC("destroy_cq used by a QP", EBUSY, ibv_destroy_cq(cq));
	struct ibv_srq_init_attr si = {.attr = {.max_wr = 4, .max_sge = 1}};
	OBJ("create_srq", 0, ibv_create_srq(pd, &si));
	struct ibv_srq *srq = obj_;
	struct ibv_qp_init_attr sa = ia;
	sa.srq = srq;
	OBJ("create_qp on the SRQ", 0, ibv_create_qp(pd, &sa));
	struct ibv_qp *sqp = obj_;
	RC("destroy_srq used by a QP", EBUSY, ibv_destroy_srq(srq));
	/* rxe_srq_chk_attr (rxe_srq.c): max_wr above max_srq_wr, -EINVAL. */
	si.attr.max_wr = dev.max_srq_wr + 1;
	OBJ("create_srq max_wr beyond max_srq_wr", EINVAL, ibv_create_srq(pd, &si));
	si.attr.max_wr = 4;
	si.attr.max_sge = dev.max_srq_sge + 1;
	OBJ("create_srq max_sge beyond max_srq_sge", EINVAL, ibv_create_srq(pd, &si));
	RC("destroy_qp on the SRQ", 0, ibv_destroy_qp(sqp));
	RC("destroy_srq", 0, ibv_destroy_srq(srq));

	/* Back to RESET: the queues are emptied; posting a send is refused again. */
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
	RC("modify_qp to RESET", 0, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	RC("post_send after RESET", EINVAL, ibv_post_send(qp, &sw, &bsw));
	RC("post_recv after RESET", EINVAL, ibv_post_recv(qp, &rw, &brw));
	/* Error state: posting succeeds and the WR is flushed (rxe requester:
	 * QP in ERR completes every WQE with IB_WC_WR_FLUSH_ERR). */
	a.qp_state = IBV_QPS_ERR;
	RC("modify_qp RESET to ERR", 0, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	sw.send_flags = IBV_SEND_SIGNALED;
	RC("post_send in ERR", 0, ibv_post_send(qp, &sw, &bsw));
	struct ibv_wc wc;
	mark("post_send in ERR: flushed", 0);
	expect("post_send in ERR: flushed", poll1(cq, &wc), IBV_WC_WR_FLUSH_ERR);
	RC("destroy_qp", 0, ibv_destroy_qp(qp));
	RC("destroy_cq", 0, ibv_destroy_cq(cq));

	/* Completion statuses, each on a fresh connected pair (rxe_req.c,
	 * rxe_resp.c, rxe_comp.c). */
	/* A local key that names nothing: the requester cannot read the SGE,
	 * IB_WC_LOC_PROT_ERR (rxe_req.c: copy_data fails). */
	wc_case("SEND with a bad lkey", IBV_WR_SEND, mr->lkey ^ 0x5a00, 64, 0, 0, 4096, IBV_WC_LOC_PROT_ERR, -1, 7);
	/* A remote key that names nothing, or a write past the region, or into a
	 * region without remote write: NAK remote access,
	 * IB_WC_REM_ACCESS_ERR (rxe_resp.c check_rkey). */
	wc_case("WRITE with a bad rkey", IBV_WR_RDMA_WRITE, mr->lkey, 64, (uintptr_t)buf + 8192, mr->rkey ^ 0x5a00, -1,
		IBV_WC_REM_ACCESS_ERR, -1, 7);
	wc_case("WRITE past the region", IBV_WR_RDMA_WRITE, mr->lkey, 64, (uintptr_t)buf + 65536 - 32, mr->rkey, -1,
		IBV_WC_REM_ACCESS_ERR, -1, 7);
	wc_case("WRITE into a read-only region", IBV_WR_RDMA_WRITE, mr->lkey, 64, (uintptr_t)buf + 32768, mr_ro->rkey,
		-1, IBV_WC_REM_ACCESS_ERR, -1, 7);
	wc_case("ATOMIC into a region without remote atomic", IBV_WR_ATOMIC_FETCH_AND_ADD, mr->lkey, 8,
		(uintptr_t)buf + 32768, mr_ro->rkey, -1, IBV_WC_REM_ACCESS_ERR, -1, 7);
	/* A SEND longer than the receive buffer: NAK invalid request, the
	 * sender's IB_WC_REM_INV_REQ_ERR (rxe_resp.c RESPST_ERR_LENGTH, class C). */
	wc_case("SEND longer than the receive", IBV_WR_SEND, mr->lkey, 256, 0, 0, 64, IBV_WC_REM_INV_REQ_ERR, -1, 7);
	/* No receive posted and rnr_retry 0: IB_WC_RNR_RETRY_EXC_ERR (rxe_comp.c). */
	wc_case("SEND with no receive, rnr_retry 0", IBV_WR_SEND, mr->lkey, 64, 0, 0, -1, IBV_WC_RNR_RETRY_EXC_ERR, -1, 0);
	/* Sanity: the same pair setup works. */
	wc_case("SEND", IBV_WR_SEND, mr->lkey, 64, 0, 0, 4096, IBV_WC_SUCCESS, IBV_WC_SUCCESS, 7);

	/* Deregistering a region with a receive outstanding: the kernel allows
	 * it (no use count from WRs), and the receive cannot land in memory no
	 * longer registered: a NAK remote operational error, the sender's
	 * IB_WC_REM_OP_ERR, as rxe (rxe_resp.c RESPST_ERR_MALFORMED_WQE). The
	 * receiver's status is IB_WC_LOC_PROT_ERR, IBTA's for a receive WQE
	 * whose L_Key is not valid (and mlx5's), where rxe reports every
	 * malformed WQE as IB_WC_LOC_QP_OP_ERR: the engine follows IBTA here. */
	{
		struct pair p;
		if (new_pair(&p, 7))
			return 2;
		char *rb = aligned_alloc(4096, 4096);
		memset(rb, 0, 4096);
		OBJ("reg_mr for the receive", 0, ibv_reg_mr(pd, rb, 4096, IBV_ACCESS_LOCAL_WRITE));
		struct ibv_mr *rm = obj_;
		RC("post_recv into it", 0, post_recv_one(p.b, rm->lkey, 4096, rb));
		RC("dereg_mr with a receive outstanding", 0, ibv_dereg_mr(rm));
		strcpy(buf, "must not land");
		RC("SEND to it: post", 0, post_one(p.a, IBV_WR_SEND, mr->lkey, 64, 0, 0));
		mark("SEND to it: receiver status", 0);
		expect("SEND to it: receiver status", poll1(p.bcq, &wc), IBV_WC_LOC_PROT_ERR);
		mark("SEND to it: sender status", 0);
		expect("SEND to it: sender status", poll1(p.acq, &wc), IBV_WC_REM_OP_ERR);
		expect("SEND to it: nothing written", rb[0], 0);
		free_pair(&p);
		free(rb);
	}

	RC("dereg_mr", 0, ibv_dereg_mr(mr));
	RC("dereg_mr read only", 0, ibv_dereg_mr(mr_ro));
	RC("dealloc_pd", 0, ibv_dealloc_pd(pd));
	RC("close_device", 0, ibv_close_device(ctx));
	ibv_free_device_list(l);
	printf("checks: %d, bad: %d\n", total, bad);
	return bad ? 1 : 0;
}
