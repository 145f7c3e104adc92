/* hostile: wrong and hostile calls through the verbs API that badcalls does
 * not make, each answer (errno, or completion status) checked against
 * libibverbs over the kernel's rxe (rdma-core's providers/rxe/rxe.c and
 * Linux's drivers/infiniband/{core,sw/rxe}; each case cites where its answer
 * comes from). Output as checks.h says; exits 0 when every check passed. No
 * check may crash the process or hang: the test bounds it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rcconnect.h"
#include "checks.h"

static struct ibv_context *ctx;
static union ibv_gid gid;
static struct ibv_pd *pd, *pd2;
static char *buf;		/* 64 KiB, registered as mr in pd */
static struct ibv_mr *mr;	/* all access, pd */
static struct ibv_mr *mr2;	/* buf, all access, pd2 */
static long pagesz;

/* A connected RC pair on pd: a sends, b receives, each with its own CQ. */
struct pair {
	struct ibv_cq *acq, *bcq;
	struct ibv_qp *a, *b;
};

static struct ibv_qp *new_qp(struct ibv_cq *c)
{
	struct ibv_qp_init_attr ia = {.send_cq = c, .recv_cq = c, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2}};
	return ibv_create_qp(pd, &ia);
}

static int new_pair(struct pair *p)
{
	struct rc_params rp = {.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					 IBV_ACCESS_REMOTE_ATOMIC,
		.psn = 100, .min_rnr_timer = 1, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7};
	p->acq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	p->bcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!p->acq || !p->bcq)
		return -1;
	p->a = new_qp(p->acq);
	p->b = new_qp(p->bcq);
	if (!p->a || !p->b)
		return -1;
	return rc_connect(p->a, p->b->qp_num, gid, rp) | rc_connect(p->b, p->a->qp_num, gid, rp);
}

static void free_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->acq);
	ibv_destroy_cq(p->bcq);
}

/* A transfer on a fresh pair: one send WR of op with (num_sge, addr, len,
 * lkey) and remote (raddr, rkey); a receive of recv_len bytes on b first
 * when recv_len >= 0. It checks the sender's status, and the receiver's
 * when recv_want >= 0. */
struct xfer {
	const char *name;
	enum ibv_wr_opcode op;
	int num_sge;
	uint64_t addr;
	uint32_t len, lkey;
	uint64_t raddr;
	uint32_t rkey;
	int recv_len;
	int send_want, recv_want;
};

static void run_xfer(const struct xfer *x)
{
	struct pair p;
	struct ibv_wc wc;
	char n[160];
	if (new_pair(&p)) {
		expect(x->name, -100, 0);
		return;
	}
	if (x->recv_len >= 0) {
		struct ibv_sge s = {.addr = (uintptr_t)buf + 16384, .length = (uint32_t)x->recv_len, .lkey = mr->lkey};
		struct ibv_recv_wr w = {.wr_id = 9, .sg_list = &s, .num_sge = 1}, *b;
		ibv_post_recv(p.b, &w, &b);
	}
	struct ibv_sge s = {.addr = x->addr, .length = x->len, .lkey = x->lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &s, .num_sge = x->num_sge, .opcode = x->op,
		.send_flags = IBV_SEND_SIGNALED}, *b;
	w.wr.rdma.remote_addr = x->raddr;
	w.wr.rdma.rkey = x->rkey;
	snprintf(n, sizeof(n), "%s: post", x->name);
	RC(n, 0, ibv_post_send(p.a, &w, &b));
	snprintf(n, sizeof(n), "%s: sender status", x->name);
	mark(n, 0);
	expect(n, poll1(p.acq, &wc), x->send_want);
	if (x->recv_want >= 0) {
		snprintf(n, sizeof(n), "%s: receiver status", x->name);
		mark(n, 0);
		expect(n, poll1(p.bcq, &wc), x->recv_want);
	}
	free_pair(&p);
}

/* guarded returns a page whose next page is PROT_NONE: a read past its end
 * faults. */
static char *guarded(void)
{
	char *p = mmap(NULL, 2 * pagesz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || mprotect(p + pagesz, pagesz, PROT_NONE))
		return NULL;
	return p;
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 2;
	pagesz = sysconf(_SC_PAGESIZE);
	ctx = ibv_open_device(l[0]);
	if (!ctx || ibv_query_gid(ctx, 1, 1, &gid))
		return 2;
	pd = ibv_alloc_pd(ctx);
	pd2 = ibv_alloc_pd(ctx);
	buf = aligned_alloc(4096, 65536);
	if (!pd || !pd2 || !buf)
		return 2;
	memset(buf, 0, 65536);
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	mr = ibv_reg_mr(pd, buf, 65536, all);
	mr2 = ibv_reg_mr(pd2, buf, 65536, all);
	if (!mr || !mr2)
		return 2;

	/* Work request counts. rdma-core's rxe validate_send_wr and
	 * rxe_post_one_recv compare num_sge (int) with the queue's max_sge
	 * (unsigned): a negative count is EINVAL, the WR in *bad_wr.
	 * rxe_post_one_recv checks the count before it reads the list, so a
	 * huge one is EINVAL too (rxe_post_send would read the list first; the
	 * library checks first there as well, and reads nothing). */
	{
		struct pair p;
		if (new_pair(&p))
			return 2;
		char *g = guarded();
		if (!g)
			return 2;
		struct ibv_sge *last = (struct ibv_sge *)(g + pagesz) - 1; /* the list ends at the guard page */
		*last = (struct ibv_sge){.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 1, .sg_list = last, .num_sge = -1, .opcode = IBV_WR_SEND}, *bsw = NULL;
		struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = last, .num_sge = -1}, *brw = NULL;
		RC("post_send num_sge -1", EINVAL, ibv_post_send(p.a, &sw, &bsw));
		expect("post_send num_sge -1: bad_wr", bsw == &sw, 1);
		RC("post_recv num_sge -1", EINVAL, ibv_post_recv(p.b, &rw, &brw));
		expect("post_recv num_sge -1: bad_wr", brw == &rw, 1);
		sw.num_sge = rw.num_sge = 1 << 28;
		RC("post_send num_sge 1<<28, list of one", EINVAL, ibv_post_send(p.a, &sw, &bsw));
		RC("post_recv num_sge 1<<28, list of one", EINVAL, ibv_post_recv(p.b, &rw, &brw));
		/* rxe_post_srq_recv -> rxe_post_one_recv: the same for an SRQ,
		 * the refused WR (not the good one before it) in *bad_wr. */
		struct ibv_srq_init_attr si = {.attr = {.max_wr = 4, .max_sge = 1}};
		struct ibv_srq *srq = ibv_create_srq(pd, &si);
		if (!srq)
			return 2;
		struct ibv_recv_wr ok = {.wr_id = 3, .sg_list = last, .num_sge = 1, .next = &rw};
		rw.num_sge = -1;
		brw = NULL;
		RC("post_srq_recv num_sge -1 after a good WR", EINVAL, ibv_post_srq_recv(srq, &ok, &brw));
		expect("post_srq_recv num_sge -1 after a good WR: bad_wr", brw == &rw, 1);
		rw.num_sge = 1 << 28;
		RC("post_srq_recv num_sge 1<<28, list of one", EINVAL, ibv_post_srq_recv(srq, &rw, &brw));
		RC("destroy_srq", 0, ibv_destroy_srq(srq));
		/* rxe_poll_cq: for (npolled = 0; npolled < ne; ...): no entries
		 * asked, none polled, 0. */
		struct ibv_wc wc;
		RC("poll_cq 0 entries", 0, ibv_poll_cq(p.acq, 0, &wc));
		RC("poll_cq -1 entries", 0, ibv_poll_cq(p.acq, -1, &wc));
		RC("req_notify_cq without a channel", 0, ibv_req_notify_cq(p.acq, 0));
		munmap(g, 2 * pagesz);
		free_pair(&p);
	}

	/* Memory that cannot be registered. ib_umem_get pins the pages with
	 * pin_user_pages_fast, for writing when the access has a write bit
	 * (ib_access_writable): a page not mapped, or not accessible, or read
	 * only for a writable region, fails to pin, -EFAULT. */
	{
		char *g = guarded();
		char *ro = mmap(NULL, pagesz, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		char *hole = mmap(NULL, 3 * pagesz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (!g || ro == MAP_FAILED || hole == MAP_FAILED || munmap(hole + pagesz, pagesz))
			return 2;
		OBJ("reg_mr over a PROT_NONE page", EFAULT, ibv_reg_mr(pd, g, 2 * pagesz, IBV_ACCESS_LOCAL_WRITE));
		if (obj_)
			ibv_dereg_mr(obj_);
		OBJ("reg_mr over an unmapped page", EFAULT, ibv_reg_mr(pd, hole, 3 * pagesz, IBV_ACCESS_LOCAL_WRITE));
		if (obj_)
			ibv_dereg_mr(obj_);
		OBJ("reg_mr writable over a read-only page", EFAULT,
		    ibv_reg_mr(pd, ro, pagesz, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
		if (obj_)
			ibv_dereg_mr(obj_);
		OBJ("reg_mr remote read of a read-only page", 0, ibv_reg_mr(pd, ro, pagesz, IBV_ACCESS_REMOTE_READ));
		if (obj_)
			ibv_dereg_mr(obj_);
		munmap(g, 2 * pagesz);
		munmap(ro, pagesz);
		munmap(hole, pagesz);
		munmap(hole + 2 * pagesz, pagesz);
	}

	/* Keys and bounds on the wire (rxe_req.c, rxe_resp.c, rxe_mr.c). */
	uint64_t b0 = (uintptr_t)buf;
	const struct xfer xs[] = {
		/* copy_data -> lookup_mr: the MR's PD must be the QP's, and the
		 * SGE inside the MR (mr_check_range), else IB_WC_LOC_PROT_ERR. */
		{"SEND from before the region", IBV_WR_SEND, 1, b0 - 64, 128, 0, 0, 0, 4096, IBV_WC_LOC_PROT_ERR, -1},
		{"SEND past the region's end", IBV_WR_SEND, 1, b0 + 65536 - 64, 128, 0, 0, 0, 4096, IBV_WC_LOC_PROT_ERR, -1},
		{"SEND with the lkey of another PD", IBV_WR_SEND, 1, b0, 64, 1, 0, 0, 4096, IBV_WC_LOC_PROT_ERR, -1},
		/* check_rkey: an MR of another PD is an R_Key violation,
		 * NAK remote access, IB_WC_REM_ACCESS_ERR. */
		{"WRITE with the rkey of another PD", IBV_WR_RDMA_WRITE, 1, b0, 64, 0, b0 + 8192, 1, -1, IBV_WC_REM_ACCESS_ERR, -1},
		{"READ with the rkey of another PD", IBV_WR_RDMA_READ, 1, b0, 64, 0, b0 + 8192, 1, -1, IBV_WC_REM_ACCESS_ERR, -1},
		/* check_rkey: a zero-byte READ or WRITE need not name a valid
		 * address or R_Key (IBTA C9-88): executed, success. */
		{"zero-byte WRITE with a bad rkey", IBV_WR_RDMA_WRITE, 0, 0, 0, 0, 0, 0x5a5a5a00, -1, IBV_WC_SUCCESS, -1},
		{"zero-byte READ with a bad rkey", IBV_WR_RDMA_READ, 0, 0, 0, 0, 0, 0x5a5a5a00, -1, IBV_WC_SUCCESS, -1},
		/* copy_data with length 0 touches no MR: an SGE of 0 bytes
		 * with a bad lkey is no error. */
		{"zero-byte SGE with a bad lkey", IBV_WR_SEND, 1, b0, 0, 2, 0, 0, 4096, IBV_WC_SUCCESS, IBV_WC_SUCCESS},
		{"zero-byte SEND, no SGE", IBV_WR_SEND, 0, 0, 0, 0, 0, 0, 4096, IBV_WC_SUCCESS, IBV_WC_SUCCESS},
	};
	for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
		struct xfer x = xs[i];
		/* lkey/rkey 0: the right MR; 1: the other PD's; 2: a bad key. */
		x.lkey = x.lkey == 0 ? mr->lkey : x.lkey == 1 ? mr2->lkey : mr->lkey ^ 0x5a00;
		if (x.rkey == 0)
			x.rkey = mr->rkey;
		else if (x.rkey == 1)
			x.rkey = mr2->rkey;
		run_xfer(&x);
	}

	/* Modify QP attributes out of range (rxe_qp_chk_attr; core/verbs.c
	 * ib_modify_qp_is_ok; uverbs_cmd.c modify_qp). */
	{
		struct ibv_cq *c = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_qp *q = new_qp(c);
		struct ibv_qp_init_attr ua = {.send_cq = c, .recv_cq = c, .qp_type = IBV_QPT_UD,
			.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *ud = ibv_create_qp(pd, &ua);
		if (!c || !q || !ud)
			return 2;
		int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | (1 << 6)};
		/* rxe_qp_chk_attr: access flags beyond RXE_ACCESS_SUPPORTED_QP. */
		RC("modify_qp INIT access flag 1<<6", EINVAL, ibv_modify_qp(q, &a, init));
		/* ib_modify_qp_is_ok: a UD QP takes a Q_Key, not access flags. */
		a.qp_access_flags = 0;
		a.qkey = 0x11111111;
		RC("modify_qp UD INIT with access flags", EINVAL, ibv_modify_qp(ud, &a, init | IBV_QP_QKEY));
		RC("modify_qp UD INIT", 0, ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
		RC("modify_qp RESET to INIT", 0, ibv_modify_qp(q, &a, init));
		int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = q->qp_num,
			.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
			.ah_attr = {.is_global = 1, .port_num = 2, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}}};
		/* uverbs modify_qp: IB_QP_AV with a port not on the device, -EINVAL. */
		RC("modify_qp RTR address on port 2", EINVAL, ibv_modify_qp(q, &r, rtr));
		r.ah_attr.port_num = 1;
		/* rdma_fill_sgid_attr -> rdma_get_gid_attr: an empty entry of the
		 * table (rxe's has 1024) is -ENODATA (Linux 5.10 on; Debian 12's
		 * 6.1). */
		r.ah_attr.grh.sgid_index = 255;
		RC("modify_qp RTR sgid_index 255, an empty entry", ENODATA, ibv_modify_qp(q, &r, rtr));
		r.ah_attr.grh.sgid_index = 1;
		/* ib_modify_qp_is_ok: INIT to RTR does not take the SQ PSN. */
		RC("modify_qp RTR with sq_psn", EINVAL, ibv_modify_qp(q, &r, rtr | IBV_QP_SQ_PSN));
		RC("modify_qp INIT to RTR", 0, ibv_modify_qp(q, &r, rtr));
		int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
		struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};
		RC("modify_qp RTR to RTS", 0, ibv_modify_qp(q, &s, rts));
		/* ib_modify_qp_is_ok: RTS to RTS takes no PSN, no path MTU. */
		RC("modify_qp RTS to RTS with sq_psn", EINVAL, ibv_modify_qp(q, &s, IBV_QP_STATE | IBV_QP_SQ_PSN));
		RC("modify_qp RTS to RTS with min_rnr_timer", 0, ibv_modify_qp(q, &s, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER));
		/* ib_modify_qp_is_ok: IB_QP_CUR_STATE must name the state the QP is in... */
		s.cur_qp_state = IBV_QPS_RTS;
		RC("modify_qp RTS to RTS with cur_qp_state RTS", 0, ibv_modify_qp(q, &s, IBV_QP_STATE | IBV_QP_CUR_STATE));
		/* ...(rxe __qp_chk_state takes cur_qp_state as the state it is in):
		 * INIT to RTS is no transition. */
		s.cur_qp_state = IBV_QPS_INIT;
		RC("modify_qp with cur_qp_state INIT to RTS", EINVAL, ibv_modify_qp(q, &s, IBV_QP_STATE | IBV_QP_CUR_STATE));
		ibv_destroy_qp(q);
		ibv_destroy_qp(ud);
		ibv_destroy_cq(c);
		/* ib_uverbs_create_ah: a port not on the device, -EINVAL;
		 * rdma_get_gid_attr: an empty entry, -ENODATA. */
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 2, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}};
		OBJ("create_ah on port 2", EINVAL, ibv_create_ah(pd, &aa));
		aa.port_num = 1;
		aa.grh.sgid_index = 255;
		OBJ("create_ah sgid_index 255, an empty entry", ENODATA, ibv_create_ah(pd, &aa));
	}

	/* Destroying what is in use (uverbs_free_* in core/uverbs_std_types*.c
	 * and rdma-core's ibv_destroy_comp_channel). */
	{
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		struct ibv_cq *c = ibv_create_cq(ctx, 4, NULL, ch, 0);
		if (!ch || !c)
			return 2;
		RC("destroy_comp_channel with a CQ", EBUSY, ibv_destroy_comp_channel(ch));
		RC("destroy_cq on the channel", 0, ibv_destroy_cq(c));
		RC("destroy_comp_channel", 0, ibv_destroy_comp_channel(ch));
		/* A PD freed while in use would be used after free by what
		 * follows: each case ends on a new PD if the dealloc went through. */
		struct ibv_pd *p3 = ibv_alloc_pd(ctx);
		struct ibv_srq_init_attr si = {.attr = {.max_wr = 4, .max_sge = 1}};
		OBJ("create_srq", 0, ibv_create_srq(p3, &si));
		struct ibv_srq *srq = obj_;
		RC("dealloc_pd with an SRQ", EBUSY, ibv_dealloc_pd(p3));
		if (rc_last == 0)
			return 1;
		if (srq)
			RC("destroy_srq", 0, ibv_destroy_srq(srq));
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}};
		OBJ("create_ah", 0, ibv_create_ah(p3, &aa));
		struct ibv_ah *ah = obj_;
		/* rdma_create_user_ah takes a use of the PD (pd->usecnt): -EBUSY. */
		RC("dealloc_pd with an AH", EBUSY, ibv_dealloc_pd(p3));
		if (rc_last == 0)
			return 1;
		if (ah)
			RC("destroy_ah", 0, ibv_destroy_ah(ah));
		RC("dealloc_pd", 0, ibv_dealloc_pd(p3));
	}

	/* The work request builders (ibv_wr_*) of an extended QP. rdma-core's
	 * rxe wr_set_sge_list: more SGEs than max_send_sge, and
	 * wr_set_inline_data(_list): more bytes than max_inline_data, are
	 * ENOSPC at ibv_wr_complete, before the list or the data is read; the
	 * QP builds the next WR list as if nothing happened. */
	{
		struct ibv_cq *c = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_qp_init_attr_ex x = {.send_cq = c, .recv_cq = c, .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2, .max_inline_data = 64},
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_SEND};
		struct ibv_qp *q = c ? ibv_create_qp_ex(ctx, &x) : NULL;
		struct ibv_qp *peer = c ? new_qp(c) : NULL;
		struct ibv_qp_ex *qx = q ? ibv_qp_to_qp_ex(q) : NULL;
		struct rc_params rp = {.access = IBV_ACCESS_LOCAL_WRITE, .psn = 7, .min_rnr_timer = 1, .timeout = 14,
			.retry_cnt = 7, .rnr_retry = 7};
		char *g = guarded();
		if (!qx || !peer || !g || rc_connect(q, peer->qp_num, gid, rp) || rc_connect(peer, q->qp_num, gid, rp))
			return 2;
		struct ibv_sge *last = (struct ibv_sge *)(g + pagesz) - 1; /* the list ends at the guard page */
		*last = (struct ibv_sge){.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		mark("wr_set_sge_list beyond max_send_sge", 1); /* the setter refuses, before ibv_wr_complete */
		ibv_wr_start(qx);
		ibv_wr_send(qx);
		ibv_wr_set_sge_list(qx, x.cap.max_send_sge + 1, last + 1 - (x.cap.max_send_sge + 1));
		expect("wr_set_sge_list beyond max_send_sge", ibv_wr_complete(qx), ENOSPC);
		mark("wr_set_sge_list of 1<<28, a list of one", 1); /* the setter refuses, before ibv_wr_complete */
		ibv_wr_start(qx);
		ibv_wr_send(qx);
		ibv_wr_set_sge_list(qx, (size_t)1 << 28, last);
		expect("wr_set_sge_list of 1<<28, a list of one", ibv_wr_complete(qx), ENOSPC);
		mark("wr_set_inline_data beyond max_inline_data", 1); /* the setter refuses, before ibv_wr_complete */
		ibv_wr_start(qx);
		ibv_wr_send(qx);
		ibv_wr_set_inline_data(qx, g + pagesz - 8, x.cap.max_inline_data + 1);
		expect("wr_set_inline_data beyond max_inline_data", ibv_wr_complete(qx), ENOSPC);
		mark("wr_set_inline_data of 1 GiB, 8 bytes mapped", 1); /* the setter refuses, before ibv_wr_complete */
		ibv_wr_start(qx);
		ibv_wr_send(qx);
		ibv_wr_set_inline_data(qx, g + pagesz - 8, (size_t)1 << 30);
		expect("wr_set_inline_data of 1 GiB, 8 bytes mapped", ibv_wr_complete(qx), ENOSPC);
		struct ibv_data_buf two[2] = {{g, 48}, {g, 48}};
		mark("wr_set_inline_data_list of 96 bytes, max_inline_data 64", 1); /* the setter refuses, before ibv_wr_complete */
		ibv_wr_start(qx);
		ibv_wr_send(qx);
		ibv_wr_set_inline_data_list(qx, 2, two);
		expect("wr_set_inline_data_list of 96 bytes, max_inline_data 64", ibv_wr_complete(qx), ENOSPC);
		/* The next list is built and posted as if nothing happened. */
		struct ibv_sge rs = {.addr = (uintptr_t)buf + 16384, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *brw;
		ibv_post_recv(peer, &rw, &brw);
		ibv_wr_start(qx);
		qx->wr_id = 77;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(qx);
		ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
		RC("wr_complete after the refusals", 0, ibv_wr_complete(qx));
		struct ibv_wc wc;
		mark("wr_complete after the refusals: sender status", 0);
		expect("wr_complete after the refusals: sender status", poll1(c, &wc), IBV_WC_SUCCESS);
		ibv_destroy_qp(q);
		ibv_destroy_qp(peer);
		ibv_destroy_cq(c);
		munmap(g, 2 * pagesz);
	}

	/* A UD SEND longer than the port's MTU. IBTA C10-93.1.1: no packet is
	 * sent and it is no error; rxe completes it with IBV_WC_SUCCESS
	 * (rxe_req.c, "fake a successful UD send"), the QP stays in RTS, and the
	 * next SEND, which fits, is the receiver's first message. */
	{
		struct ibv_port_attr pa;
		struct ibv_cq *sc = ibv_create_cq(ctx, 8, NULL, NULL, 0), *rc = ibv_create_cq(ctx, 8, NULL, NULL, 0);
		struct ibv_qp_init_attr ua = {.send_cq = sc, .recv_cq = rc, .qp_type = IBV_QPT_UD,
			.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *u[2] = {sc && rc ? ibv_create_qp(pd, &ua) : NULL, sc && rc ? ibv_create_qp(pd, &ua) : NULL};
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}};
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		if (!u[0] || !u[1] || !ah || ibv_query_port(ctx, 1, &pa))
			return 2;
		for (int i = 0; i < 2; i++) {
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
			if (ibv_modify_qp(u[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
				return 2;
			a.qp_state = IBV_QPS_RTR;
			if (ibv_modify_qp(u[i], &a, IBV_QP_STATE))
				return 2;
			a.qp_state = IBV_QPS_RTS;
			if (ibv_modify_qp(u[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
				return 2;
		}
		struct ibv_sge rs = {.addr = (uintptr_t)buf + 16384, .length = 16384, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 3, .sg_list = &rs, .num_sge = 1}, *brw;
		ibv_post_recv(u[1], &rw, &brw);
		struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = (128u << pa.active_mtu) + 1, .lkey = mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 4, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED}, *bsw;
		sw.wr.ud.ah = ah;
		sw.wr.ud.remote_qpn = u[1]->qp_num;
		sw.wr.ud.remote_qkey = 0x11111111;
		struct ibv_wc wc;
		RC("UD SEND of the MTU + 1: post", 0, ibv_post_send(u[0], &sw, &bsw));
		mark("UD SEND of the MTU + 1: sender status", 0);
		expect("UD SEND of the MTU + 1: sender status", poll1(sc, &wc), IBV_WC_SUCCESS);
		ss.length = 16;
		RC("UD SEND of 16 after it: post", 0, ibv_post_send(u[0], &sw, &bsw));
		mark("UD SEND of 16 after it: sender status", 0);
		expect("UD SEND of 16 after it: sender status", poll1(sc, &wc), IBV_WC_SUCCESS);
		mark("UD SEND of 16 after it: the receiver's first message", 0);
		expect("UD SEND of 16 after it: the receiver's first message", poll1(rc, &wc) == IBV_WC_SUCCESS ? (long)wc.byte_len : -1, 16 + 40);
		ibv_destroy_qp(u[0]);
		ibv_destroy_qp(u[1]);
		ibv_destroy_ah(ah);
		ibv_destroy_cq(sc);
		ibv_destroy_cq(rc);
	}

	ibv_dereg_mr(mr);
	ibv_dereg_mr(mr2);
	ibv_dealloc_pd(pd);
	ibv_dealloc_pd(pd2);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("checks: %d, bad: %d\n", total, bad);
	return bad ? 1 : 0;
}
