package main

// Extended CQs and QPs: ibv_create_cq_ex with its polling functions
// (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*), and
// ibv_create_qp_ex with ibv_qp_to_qp_ex and the work request builders
// (ibv_wr_start, ibv_wr_send, ibv_wr_rdma_write, ibv_wr_set_sge, ...,
// ibv_wr_complete), which programs written for the newer API (pyverbs' CQEX and
// QPEx, perftest on some devices, rdma-core's tests) use. Both sit on the
// plain verbs: an extended CQ polls through the context's poll_cq one
// completion at a time, and the builders collect ibv_send_wr's that
// ibv_wr_complete posts as one list. What rxe's provider refuses is refused
// the same way: completion fields and send operations it does not offer are
// EOPNOTSUPP at create (rdma-core providers/rxe/rxe.c).

/*
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "srobj.h"

extern void sr_debug(const char *format, ...);

static struct sr_cq *sr_cqx(struct ibv_cq_ex *c)
{
	return (struct sr_cq *)c;
}

static int sr_cqx_poll1(struct ibv_cq_ex *c)
{
	struct ibv_cq *cq = ibv_cq_ex_to_cq(c);
	struct sr_cq *x = sr_cqx(c);
	int n = cq->context->ops.poll_cq(cq, 1, &x->xwc);
	if (n < 0)
		return EINVAL;
	if (n == 0)
		return ENOENT;
	c->status = x->xwc.status;
	c->wr_id = x->xwc.wr_id;
	return 0;
}

// ibv_start_poll takes the CQ's xmu, held until ibv_end_poll, unless it
// fails (ENOENT: empty), as rxe's cq_start_poll takes and releases its lock.
static int sr_cqx_start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	pthread_mutex_lock(&sr_cqx(c)->xmu);
	int rc = sr_cqx_poll1(c);
	if (rc)
		pthread_mutex_unlock(&sr_cqx(c)->xmu);
	return rc;
}

static int sr_cqx_next_poll(struct ibv_cq_ex *c)
{
	return sr_cqx_poll1(c);
}

static void sr_cqx_end_poll(struct ibv_cq_ex *c)
{
	pthread_mutex_unlock(&sr_cqx(c)->xmu);
}

static enum ibv_wc_opcode sr_cqx_opcode(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.opcode; }
static uint32_t sr_cqx_vendor_err(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.vendor_err; }
static uint32_t sr_cqx_byte_len(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.byte_len; }
// read_imm_data serves ibv_wc_read_imm_data and ibv_wc_read_invalidated_rkey.
static __be32 sr_cqx_imm(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.imm_data; }
static uint32_t sr_cqx_qp_num(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.qp_num; }
static uint32_t sr_cqx_src_qp(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.src_qp; }
static unsigned int sr_cqx_wc_flags(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.wc_flags; }
static uint32_t sr_cqx_slid(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.slid; }
static uint8_t sr_cqx_sl(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.sl; }
static uint8_t sr_cqx_dlid_path_bits(struct ibv_cq_ex *c) { return sr_cqx(c)->xwc.dlid_path_bits; }

struct ibv_cq_ex *sr_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	if (!a) {
		errno = EINVAL;
		return NULL;
	}
	// rxe_create_cq_ex: wc_flags beyond what it reads are EOPNOTSUPP; here
	// the standard ones (no timestamps, VLAN or flow tag).
	if (a->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS) {
		sr_debug("create cq ex: wc_flags 0x%llx: only IBV_WC_STANDARD_FLAGS (0x%x) are offered",
			 (unsigned long long)a->wc_flags, IBV_WC_STANDARD_FLAGS);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) {
		sr_debug("create cq ex: comp_mask 0x%x: only IBV_CQ_INIT_ATTR_MASK_FLAGS", a->comp_mask);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
		sr_debug("create cq ex: flags 0x%x not supported", a->flags);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->cqe > INT32_MAX) {
		sr_debug("create cq ex: cqe %u", a->cqe);
		errno = EINVAL;
		return NULL;
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector);
	if (!cq)
		return NULL;
	struct ibv_cq_ex *c = &((struct sr_cq *)cq)->cqx;
	pthread_mutex_init(&((struct sr_cq *)cq)->xmu, NULL);
	c->start_poll = sr_cqx_start_poll;
	c->next_poll = sr_cqx_next_poll;
	c->end_poll = sr_cqx_end_poll;
	c->read_opcode = sr_cqx_opcode;
	c->read_vendor_err = sr_cqx_vendor_err;
	c->read_byte_len = sr_cqx_byte_len;
	c->read_imm_data = sr_cqx_imm;
	c->read_qp_num = sr_cqx_qp_num;
	c->read_src_qp = sr_cqx_src_qp;
	c->read_wc_flags = sr_cqx_wc_flags;
	c->read_slid = sr_cqx_slid;
	c->read_sl = sr_cqx_sl;
	c->read_dlid_path_bits = sr_cqx_dlid_path_bits;
	return c;
}

// The work request builder of an extended QP: the WRs since ibv_wr_start,
// each with its SGEs and inline bytes at offsets in flat arrays (pointers are
// made at ibv_wr_complete, once the arrays stop moving).
struct sr_xwr {
	struct ibv_send_wr wr;
	size_t sge_off, nsge, inl_off, inl_len;
};

struct sr_qpx {
	struct sr_xwr *wrs;
	size_t nwr, capwr;
	struct ibv_sge *sges;
	size_t nsge, capsge;
	char *inl;
	size_t ninl, capinl;
	int err; // the first builder failure, returned by ibv_wr_complete
	// The QP's send limits, which the setters check as rxe's do.
	uint32_t max_sge, max_inline;
	// mu makes ibv_wr_start .. ibv_wr_complete/ibv_wr_abort a per-QP
	// critical section, as ibv_wr_post(3) says the provider does (rxe holds
	// its SQ spinlock from wr_start to wr_complete/wr_abort).
	pthread_mutex_t mu;
};

static struct sr_qpx *sr_qpx(struct ibv_qp_ex *q)
{
	return ((struct sr_qp *)q)->ext;
}

static int sr_grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap * 2 : 16;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

// sr_new_wr starts a WR with opcode op, the QP's wr_id and wr_flags.
static struct sr_xwr *sr_new_wr(struct ibv_qp_ex *q, enum ibv_wr_opcode op)
{
	struct sr_qpx *s = sr_qpx(q);
	if (s->err)
		return NULL;
	if (sr_grow((void **)&s->wrs, &s->capwr, s->nwr + 1, sizeof(*s->wrs))) {
		s->err = ENOMEM;
		return NULL;
	}
	struct sr_xwr *w = &s->wrs[s->nwr++];
	memset(w, 0, sizeof(*w));
	w->wr.wr_id = q->wr_id;
	w->wr.send_flags = q->wr_flags;
	w->wr.opcode = op;
	return w;
}

// sr_cur is the WR the setters change: the last one built.
static struct sr_xwr *sr_cur(struct ibv_qp_ex *q, const char *setter)
{
	struct sr_qpx *s = sr_qpx(q);
	if (s->err)
		return NULL;
	if (!s->nwr) {
		sr_debug("%s: no work request built since ibv_wr_start", setter);
		s->err = EINVAL;
		return NULL;
	}
	return &s->wrs[s->nwr - 1];
}

static void sr_wr_send(struct ibv_qp_ex *q) { sr_new_wr(q, IBV_WR_SEND); }

static void sr_wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	struct sr_xwr *w = sr_new_wr(q, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->wr.imm_data = imm;
}

static void sr_wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct sr_xwr *w = sr_new_wr(q, IBV_WR_SEND_WITH_INV);
	if (w)
		w->wr.invalidate_rkey = rkey;
}

static void sr_wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct sr_xwr *w = sr_new_wr(q, IBV_WR_LOCAL_INV);
	if (w)
		w->wr.invalidate_rkey = rkey;
}

// sr_wr_bind_mw binds a type 2 window (or a type 1) to the range of
// b->mr with the new R_Key rkey, whose low byte the window takes.
static void sr_wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *b)
{
	struct sr_xwr *w = sr_new_wr(q, IBV_WR_BIND_MW);
	if (!w)
		return;
	w->wr.bind_mw.mw = mw;
	w->wr.bind_mw.rkey = rkey;
	w->wr.bind_mw.bind_info = *b;
}

static void sr_wr_rdma(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct sr_xwr *w = sr_new_wr(q, op);
	if (!w)
		return;
	w->wr.wr.rdma.rkey = rkey;
	w->wr.wr.rdma.remote_addr = addr;
	w->wr.imm_data = imm;
}

static void sr_wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { sr_wr_rdma(q, IBV_WR_RDMA_WRITE, rkey, addr, 0); }
static void sr_wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm) { sr_wr_rdma(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm); }
static void sr_wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { sr_wr_rdma(q, IBV_WR_RDMA_READ, rkey, addr, 0); }

static void sr_wr_atomic(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, uint64_t cmp_add, uint64_t swap)
{
	struct sr_xwr *w = sr_new_wr(q, op);
	if (!w)
		return;
	w->wr.wr.atomic.rkey = rkey;
	w->wr.wr.atomic.remote_addr = addr;
	w->wr.wr.atomic.compare_add = cmp_add;
	w->wr.wr.atomic.swap = swap;
}

static void sr_wr_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swap) { sr_wr_atomic(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, cmp, swap); }
static void sr_wr_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add) { sr_wr_atomic(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0); }

static void sr_wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct sr_xwr *w = sr_cur(q, "ibv_wr_set_ud_addr");
	if (!w)
		return;
	w->wr.wr.ud.ah = ah;
	w->wr.wr.ud.remote_qpn = qpn;
	w->wr.wr.ud.remote_qkey = qkey;
}

static void sr_wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	struct sr_xwr *w = sr_cur(q, "ibv_wr_set_sge_list");
	if (!w)
		return;
	struct sr_qpx *s = sr_qpx(q);
	// rxe's wr_set_sge_list: more SGEs than max_send_sge is ENOSPC at
	// ibv_wr_complete; the list is not read.
	if (n > s->max_sge) {
		sr_debug("ibv_wr_set_sge_list: %zu SGEs, the QP's max_send_sge is %u", n, s->max_sge);
		s->err = ENOSPC;
		return;
	}
	if (sr_grow((void **)&s->sges, &s->capsge, s->nsge + n, sizeof(*s->sges))) {
		s->err = ENOMEM;
		return;
	}
	w->sge_off = s->nsge;
	w->nsge = n;
	w->inl_len = 0;
	memcpy(&s->sges[s->nsge], sg, n * sizeof(*sg));
	s->nsge += n;
}

static void sr_wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sg = {.addr = addr, .length = length, .lkey = lkey};
	sr_wr_set_sge_list(q, 1, &sg);
}

static void sr_wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *bufs)
{
	struct sr_xwr *w = sr_cur(q, "ibv_wr_set_inline_data_list");
	if (!w)
		return;
	struct sr_qpx *s = sr_qpx(q);
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		// rxe's wr_set_inline_data(_list): more bytes than max_inline_data
		// is ENOSPC at ibv_wr_complete; nothing is copied.
		if (bufs[i].length > s->max_inline || total + bufs[i].length > s->max_inline) {
			sr_debug("ibv_wr_set_inline_data: more than the QP's max_inline_data, %u bytes", s->max_inline);
			s->err = ENOSPC;
			return;
		}
		total += bufs[i].length;
	}
	if (sr_grow((void **)&s->inl, &s->capinl, s->ninl + total, 1)) {
		s->err = ENOMEM;
		return;
	}
	// The bytes are copied now: inline data may be reused at once.
	w->inl_off = s->ninl;
	w->inl_len = total;
	w->nsge = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(s->inl + s->ninl, bufs[i].addr, bufs[i].length);
		s->ninl += bufs[i].length;
	}
	w->wr.send_flags |= IBV_SEND_INLINE;
}

static void sr_wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	sr_wr_set_inline_data_list(q, 1, &b);
}

static void sr_wr_unsupported(struct ibv_qp_ex *q, const char *what)
{
	struct sr_qpx *s = sr_qpx(q);
	sr_debug("%s: not supported (EOPNOTSUPP)", what);
	if (!s->err)
		s->err = EOPNOTSUPP;
}

static void sr_wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss) { sr_wr_unsupported(q, "ibv_wr_send_tso"); }
static void sr_wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn) { sr_wr_unsupported(q, "ibv_wr_set_xrc_srqn"); }
static void sr_wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, const void *p) { sr_wr_unsupported(q, "ibv_wr_atomic_write"); }

static void sr_wr_reset(struct sr_qpx *s)
{
	s->nwr = s->nsge = s->ninl = 0;
	s->err = 0;
}

static void sr_wr_start(struct ibv_qp_ex *q)
{
	struct sr_qpx *s = sr_qpx(q);
	pthread_mutex_lock(&s->mu);
	sr_wr_reset(s);
}

static void sr_wr_abort(struct ibv_qp_ex *q)
{
	struct sr_qpx *s = sr_qpx(q);
	sr_wr_reset(s);
	pthread_mutex_unlock(&s->mu);
}

// sr_wr_complete posts what was built since ibv_wr_start as one list: 0, or
// the first builder failure, or ibv_post_send's errno.
static int sr_wr_complete(struct ibv_qp_ex *q)
{
	struct sr_qpx *s = sr_qpx(q);
	int err = s->err;
	if (!err && s->nwr) {
		struct ibv_sge *inl = calloc(s->nwr, sizeof(*inl));
		if (!inl) {
			err = ENOMEM;
		} else {
			for (size_t i = 0; i < s->nwr; i++) {
				struct sr_xwr *w = &s->wrs[i];
				w->wr.next = i + 1 < s->nwr ? &s->wrs[i + 1].wr : NULL;
				if (w->wr.send_flags & IBV_SEND_INLINE) {
					inl[i] = (struct ibv_sge){.addr = (uintptr_t)(s->inl + w->inl_off), .length = (uint32_t)w->inl_len};
					w->wr.sg_list = &inl[i];
					w->wr.num_sge = 1;
				} else {
					w->wr.sg_list = w->nsge ? &s->sges[w->sge_off] : NULL;
					w->wr.num_sge = (int)w->nsge;
				}
			}
			struct ibv_send_wr *bad;
			err = q->qp_base.context->ops.post_send(&q->qp_base, &s->wrs[0].wr, &bad);
			free(inl);
		}
	}
	sr_wr_reset(s);
	pthread_mutex_unlock(&s->mu);
	return err;
}

// What rxe's provider offers (RXE_SUP_RC_QP_SEND_OPS_FLAGS and the others in
// providers/rxe/rxe.c), less what the engine's verbs here cannot carry
// (atomic write).
static uint64_t sr_send_ops(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC:
		return IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
		       IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
		       IBV_QP_EX_WITH_BIND_MW;
	case IBV_QPT_UC:
		return IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
		       IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
		       IBV_QP_EX_WITH_BIND_MW;
	case IBV_QPT_UD:
		return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	default:
		return 0;
	}
}

struct ibv_qp *sr_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	if (!a) {
		errno = EINVAL;
		return NULL;
	}
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (a->comp_mask & ~known) {
		sr_debug("create qp ex: comp_mask 0x%x: only PD, SEND_OPS_FLAGS and CREATE_FLAGS", a->comp_mask);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		sr_debug("create qp ex: create_flags 0x%x not supported", a->create_flags);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd) {
		sr_debug("create qp ex: no PD (IBV_QP_INIT_ATTR_PD)");
		errno = EINVAL;
		return NULL;
	}
	struct sr_qpx *s = NULL;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		uint64_t extra = a->send_ops_flags & ~sr_send_ops(a->qp_type);
		if (extra) {
			sr_debug("create qp ex: send_ops_flags 0x%llx not supported on QP type %d",
				 (unsigned long long)extra, a->qp_type);
			errno = EOPNOTSUPP;
			return NULL;
		}
		if (!(s = calloc(1, sizeof(*s)))) {
			errno = ENOMEM;
			return NULL;
		}
	}
	struct ibv_qp_init_attr ia = {.qp_context = a->qp_context, .send_cq = a->send_cq, .recv_cq = a->recv_cq,
		.srq = a->srq, .cap = a->cap, .qp_type = a->qp_type, .sq_sig_all = a->sq_sig_all};
	struct ibv_qp *qp = ibv_create_qp(a->pd, &ia);
	if (!qp) {
		free(s);
		return NULL;
	}
	a->cap = ia.cap;
	if (!s)
		return qp;
	struct sr_qp *o = (struct sr_qp *)qp;
	struct ibv_qp_ex *x = &o->qpx;
	s->max_sge = ia.cap.max_send_sge;
	s->max_inline = ia.cap.max_inline_data;
	pthread_mutex_init(&s->mu, NULL);
	o->ext = s;
	x->comp_mask = 0;
	x->wr_atomic_cmp_swp = sr_wr_cmp_swp;
	x->wr_atomic_fetch_add = sr_wr_fetch_add;
	x->wr_bind_mw = sr_wr_bind_mw;
	x->wr_local_inv = sr_wr_local_inv;
	x->wr_rdma_read = sr_wr_rdma_read;
	x->wr_rdma_write = sr_wr_rdma_write;
	x->wr_rdma_write_imm = sr_wr_rdma_write_imm;
	x->wr_send = sr_wr_send;
	x->wr_send_imm = sr_wr_send_imm;
	x->wr_send_inv = sr_wr_send_inv;
	x->wr_send_tso = sr_wr_send_tso;
	x->wr_set_ud_addr = sr_wr_set_ud_addr;
	x->wr_set_xrc_srqn = sr_wr_set_xrc_srqn;
	x->wr_set_inline_data = sr_wr_set_inline_data;
	x->wr_set_inline_data_list = sr_wr_set_inline_data_list;
	x->wr_set_sge = sr_wr_set_sge;
	x->wr_set_sge_list = sr_wr_set_sge_list;
	x->wr_start = sr_wr_start;
	x->wr_complete = sr_wr_complete;
	x->wr_abort = sr_wr_abort;
	x->wr_atomic_write = sr_wr_atomic_write;
	return qp;
}

void sr_qpx_free(void *ext)
{
	struct sr_qpx *s = ext;
	if (!s)
		return;
	free(s->wrs);
	free(s->sges);
	free(s->inl);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

// ibv_qp_to_qp_ex returns the extended QP of a QP created with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, else NULL (as rdma-core's).
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (!qp || !((struct sr_qp *)qp)->ext)
		return NULL;
	return &((struct sr_qp *)qp)->qpx;
}
*/
import "C"
