/* fuzzcalls: reads a byte string (the file named by its second argument) and
 * makes the verb and rdma_cm calls it spells, with argument values drawn from
 * its bytes, on the first device of SOFTRDMA_DEVICES (FuzzCAPI). Objects are
 * named by an index into the tables below, so a handle is always one the
 * library returned, or NULL where rdma-core tolerates NULL (a QP's CQs and
 * SRQ, a CQ's channel, a bind's MR). Every address given to the library is
 * inside buf or 0, and every destination GID or address is a loopback one:
 * only the library's own bugs can crash this program. One line per call on
 * stdout with its answer; "done N" at the end, exit 0.
 *
 * Usage: fuzzcalls ADDR INPUT (ADDR: the device's IPv4 address). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define MAXCALLS 256
#define NOBJ 4
#define NSGE 40
#define NWC 32
#define BUFSZ 65536

static const uint8_t *in;
static size_t inlen, pos;

static uint8_t u8(void) { return pos < inlen ? in[pos++] : 0; }
/* Multi-byte values are little-endian; each byte is read in its own
 * statement, so that the order bytes are consumed in is the source's. */
static uint16_t u16(void)
{
	uint16_t lo = u8();
	return (uint16_t)(lo | u8() << 8);
}
static uint32_t u32(void)
{
	uint32_t lo = u16();
	return lo | (uint32_t)u16() << 16;
}
static uint64_t u64(void)
{
	uint64_t lo = u32();
	return lo | (uint64_t)u32() << 32;
}

/* val returns a value that is often an edge: 0, 1, -1, a power of two, INT_MAX. */
static uint32_t val(void)
{
	switch (u8() % 8) {
	case 0: return 0;
	case 1: return 1;
	case 2: return 0xffffffffu;
	case 3: return u8();
	case 4: return u16();
	case 5: return 1u << (u8() % 32);
	case 6: return 0x7fffffffu;
	default: return u32();
	}
}

static void fill(void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)p)[i] = u8();
}

static char *buf;
static struct ibv_context *ctx;
static union ibv_gid own;
static struct in_addr devaddr;
static struct ibv_pd *pds[NOBJ];
static struct ibv_cq *cqs[NOBJ];
static struct ibv_qp *qps[NOBJ];
static struct ibv_mr *mrs[NOBJ];
static struct ibv_mw *mws[NOBJ];
static struct ibv_ah *ahs[NOBJ];
static struct ibv_srq *srqs[NOBJ];
static struct ibv_comp_channel *chans[NOBJ];
static struct rdma_event_channel *cmch;
static struct rdma_cm_id *ids[NOBJ];

#define PICK(t) (t[u8() % NOBJ])
/* SLOT(t) is the index of an empty slot of t, or of slot 0 (whose object is
 * then lost, never destroyed: a leak the library must survive). */
#define SLOT(t) slot((void **)t)
static int slot(void **t)
{
	for (int i = 0; i < NOBJ; i++)
		if (!t[i])
			return i;
	return 0;
}

static void rc(const char *name, int r)
{
	printf("%s -> %d\n", name, r);
}

static void ret(const char *name, int r)
{
	printf("%s -> %d errno %d\n", name, r, r ? errno : 0);
}

static void obj(const char *name, const void *o)
{
	printf("%s -> %s errno %d\n", name, o ? "ok" : "NULL", o ? 0 : errno);
}

/* addr returns an address inside buf with room for len bytes, or 0. */
static uint64_t addr(uint32_t len)
{
	if (u8() % 8 == 0 || len > BUFSZ)
		return 0;
	return (uintptr_t)buf + u32() % (BUFSZ - len + 1);
}

static uint32_t key(void)
{
	struct ibv_mr *m = PICK(mrs);
	switch (u8() % 3) {
	case 0: return m ? m->lkey : 0;
	case 1: return m ? m->rkey : 0;
	default: return val();
	}
}

/* gid makes g a loopback destination: our own GID, an IPv4-mapped 127/8
 * address, or zero. */
static void gid(union ibv_gid *g)
{
	switch (u8() % 3) {
	case 0: *g = own; break;
	case 1:
		memset(g, 0, sizeof(*g));
		g->raw[10] = g->raw[11] = 0xff;
		g->raw[12] = 127;
		fill(&g->raw[13], 3);
		break;
	default: memset(g, 0, sizeof(*g));
	}
}

/* sges fills the n entries of a list of NSGE that a count of n uses (the
 * rest zero); when inline is set each one lies in buf. */
static void sges(struct ibv_sge *s, int n, int inl)
{
	memset(s, 0, NSGE * sizeof(*s));
	for (int i = 0; i < n && i < NSGE; i++) {
		s[i].length = inl || u8() % 2 ? u16() % 4096 : val();
		s[i].addr = addr(s[i].length);
		if (inl && !s[i].addr)
			s[i].length = 0;
		s[i].lkey = key();
	}
}

static int nsge(void)
{
	switch (u8() % 6) {
	case 0: return -1;
	case 1: return NSGE;
	case 2: return 1 << 28;
	default: return u8() % 5;
	}
}

static void post_send(void)
{
	struct ibv_qp *qp = PICK(qps);
	if (!qp)
		return;
	struct ibv_sge sl[3][NSGE];
	struct ibv_send_wr w[3], *bad = NULL;
	int n = 1 + u8() % 3;
	memset(w, 0, sizeof(w));
	for (int i = 0; i < n; i++) {
		w[i].wr_id = i;
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
		switch (u8() % 4) {
		case 0: w[i].opcode = u8(); break;
		case 1: w[i].opcode = val(); break;
		default: w[i].opcode = u8() % 12;
		}
		w[i].send_flags = u8() % 2 ? u8() & 0x1f : val();
		w[i].num_sge = nsge();
		w[i].sg_list = w[i].num_sge == 0 && u8() % 2 ? NULL : sl[i];
		sges(sl[i], w[i].num_sge, w[i].send_flags & IBV_SEND_INLINE);
		w[i].imm_data = u32();
		if (qp->qp_type == IBV_QPT_UD) {
			w[i].wr.ud.ah = PICK(ahs);
			if (!w[i].wr.ud.ah)
				return;
			struct ibv_qp *d = PICK(qps);
			w[i].wr.ud.remote_qpn = u8() % 2 && d ? d->qp_num : u32();
			w[i].wr.ud.remote_qkey = u32();
		} else if (w[i].opcode == IBV_WR_BIND_MW) {
			w[i].bind_mw.mw = PICK(mws);
			if (!w[i].bind_mw.mw)
				return;
			w[i].bind_mw.rkey = u32();
			w[i].bind_mw.bind_info.mr = PICK(mrs);
			w[i].bind_mw.bind_info.length = u16();
			w[i].bind_mw.bind_info.addr = addr(w[i].bind_mw.bind_info.length);
			w[i].bind_mw.bind_info.mw_access_flags = val();
		} else if (w[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w[i].wr.atomic.remote_addr = u8() % 2 ? addr(8) : u64();
			w[i].wr.atomic.compare_add = u64();
			w[i].wr.atomic.swap = u64();
			w[i].wr.atomic.rkey = key();
		} else {
			w[i].wr.rdma.remote_addr = u8() % 2 ? addr(0) : u64();
			w[i].wr.rdma.rkey = key();
		}
		if (w[i].opcode == IBV_WR_TSO) {
			w[i].tso.hdr = buf;
			w[i].tso.hdr_sz = u8();
			w[i].tso.mss = u16();
		}
	}
	errno = 0;
	int r = ibv_post_send(qp, w, &bad);
	printf("post_send n=%d op0=%d -> %d bad=%ld\n", n, w[0].opcode, r, bad ? (long)(bad - w) : -1L);
}

static void post_recv(int srq)
{
	struct ibv_sge sl[3][NSGE];
	struct ibv_recv_wr w[3], *bad = NULL;
	int n = 1 + u8() % 3;
	memset(w, 0, sizeof(w));
	for (int i = 0; i < n; i++) {
		w[i].wr_id = i;
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
		w[i].num_sge = nsge();
		w[i].sg_list = w[i].num_sge == 0 && u8() % 2 ? NULL : sl[i];
		sges(sl[i], w[i].num_sge, 0);
	}
	int r;
	if (srq) {
		struct ibv_srq *s = PICK(srqs);
		if (!s)
			return;
		r = ibv_post_srq_recv(s, w, &bad);
	} else {
		struct ibv_qp *qp = PICK(qps);
		if (!qp)
			return;
		r = ibv_post_recv(qp, w, &bad);
	}
	printf("post_%srecv n=%d -> %d bad=%ld\n", srq ? "srq_" : "", n, r, bad ? (long)(bad - w) : -1L);
}

static void create_qp(void)
{
	struct ibv_pd *pd = PICK(pds);
	if (!pd)
		return;
	static const int types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND,
		IBV_QPT_XRC_RECV, IBV_QPT_DRIVER, 0, 1, 5};
	struct ibv_qp_init_attr ia = {0};
	ia.send_cq = PICK(cqs);
	ia.recv_cq = PICK(cqs);
	ia.srq = PICK(srqs);
	uint8_t t = u8();
	ia.qp_type = t < 200 ? types[t % 10] : t;
	if (u8() % 2) {
		ia.cap.max_send_wr = u8() % 64;
		ia.cap.max_recv_wr = u8() % 64;
		ia.cap.max_send_sge = u8() % 8;
		ia.cap.max_recv_sge = u8() % 8;
		ia.cap.max_inline_data = u8();
	} else {
		ia.cap.max_send_wr = val();
		ia.cap.max_recv_wr = val();
		ia.cap.max_send_sge = val();
		ia.cap.max_recv_sge = val();
		ia.cap.max_inline_data = val();
	}
	ia.sq_sig_all = u8() % 4 == 0 ? (int)val() : u8() % 2;
	int i = SLOT(qps);
	errno = 0;
	qps[i] = ibv_create_qp(pd, &ia);
	printf("create_qp type=%d -> %s errno %d\n", ia.qp_type, qps[i] ? "ok" : "NULL", qps[i] ? 0 : errno);
}

/* modify_qp either fills the attributes with input bytes (loopback GIDs
 * only) under a random mask, or, one time in four, makes the usual move to
 * INIT, RTR or RTS towards a QP of the table, so that inputs reach the
 * connected states where work requests run. */
static void modify_qp(void)
{
	struct ibv_qp *qp = PICK(qps);
	if (!qp)
		return;
	struct ibv_qp_attr a;
	int mask;
	if (u8() % 4 == 0) {
		memset(&a, 0, sizeof(a));
		a.qp_state = 1 + u8() % 3;
		a.port_num = 1;
		a.qp_access_flags = u8() & 0xf;
		a.path_mtu = 1 + u8() % 5;
		struct ibv_qp *d = PICK(qps);
		a.dest_qp_num = d ? d->qp_num : u32();
		a.ah_attr.is_global = 1;
		a.ah_attr.port_num = 1;
		a.ah_attr.grh.sgid_index = 1;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.grh.dgid = own;
		a.rq_psn = a.sq_psn = u16();
		a.max_dest_rd_atomic = a.max_rd_atomic = u8() % 4;
		a.min_rnr_timer = u8() % 32;
		a.timeout = u8() % 16;
		a.retry_cnt = a.rnr_retry = u8() % 8;
		a.qkey = u32();
		int ud = qp->qp_type == IBV_QPT_UD, uc = qp->qp_type == IBV_QPT_UC;
		switch (a.qp_state) {
		case IBV_QPS_INIT:
			mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
			break;
		case IBV_QPS_RTR:
			mask = ud ? IBV_QP_STATE
				  : IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					(uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
			break;
		default:
			mask = ud || uc ? IBV_QP_STATE | IBV_QP_SQ_PSN
					: IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
		}
		if (u8() % 2)
			mask ^= 1 << (u8() % 22);
	} else {
		fill(&a, sizeof(a));
		if (u8() % 2)
			a.qp_state = u8() % 8;
		gid(&a.ah_attr.grh.dgid);
		gid(&a.alt_ah_attr.grh.dgid);
		mask = u8() % 2 ? (int)(val() & 0x3fffff) : (int)val();
	}
	errno = 0;
	int r = ibv_modify_qp(qp, &a, mask);
	printf("modify_qp state=%d mask=%#x -> %d\n", a.qp_state, mask, r);
}

static void reg_mr(void)
{
	struct ibv_pd *pd = PICK(pds);
	if (!pd)
		return;
	size_t len = u8() % 4 == 0 ? val() % (BUFSZ + 1) : u16() % (8192 + 1);
	void *a = (void *)(uintptr_t)addr(len);
	if (!a && u8() % 2)
		len = 0;
	int access = u8() % 2 ? u8() & 0x1f : (int)val();
	int i = SLOT(mrs);
	errno = 0;
	mrs[i] = ibv_reg_mr(pd, a, len, access);
	printf("reg_mr len=%zu access=%#x null=%d -> %s errno %d\n", len, access, !a, mrs[i] ? "ok" : "NULL",
		mrs[i] ? 0 : errno);
}

static void create_ah(void)
{
	struct ibv_pd *pd = PICK(pds);
	if (!pd)
		return;
	struct ibv_ah_attr a;
	fill(&a, sizeof(a));
	if (u8() % 2) {
		a.port_num = 1;
		a.is_global = 1;
		a.grh.sgid_index = u8() % 3;
	}
	gid(&a.grh.dgid);
	int i = SLOT(ahs);
	errno = 0;
	ahs[i] = ibv_create_ah(pd, &a);
	obj("create_ah", ahs[i]);
}

static void cm_call(int op)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = devaddr, .sin_port = htons(u16())};
	if (u8() % 2)
		sa.sin_addr.s_addr = htonl(0x7f000000u | (u32() & 0xffffff));
	struct rdma_cm_id *id = PICK(ids);
	errno = 0;
	switch (op) {
	case 0: {
		static const int ps[] = {RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB, RDMA_PS_IPOIB};
		uint8_t p = u8();
		int i = SLOT(ids);
		int r = rdma_create_id(cmch, &ids[i], NULL, p < 200 ? ps[p % 4] : p);
		if (r)
			ids[i] = NULL;
		ret("rdma_create_id", r);
		break;
	}
	case 1:
		if (id)
			ret("rdma_bind_addr", rdma_bind_addr(id, (struct sockaddr *)&sa));
		break;
	case 2:
		if (id)
			ret("rdma_resolve_addr", rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 1 + u8() % 50));
		break;
	case 3:
		if (id)
			ret("rdma_resolve_route", rdma_resolve_route(id, 1 + u8() % 50));
		break;
	case 4: {
		int backlog = (int)val();
		if (id)
			ret("rdma_listen", rdma_listen(id, backlog));
		break;
	}
	case 5: {
		struct rdma_cm_event *e;
		int r = rdma_get_cm_event(cmch, &e);
		ret("rdma_get_cm_event", r);
		if (!r)
			rc("rdma_ack_cm_event", rdma_ack_cm_event(e));
		break;
	}
	case 6:
		if (id) {
			int r = rdma_destroy_id(id);
			ret("rdma_destroy_id", r);
			for (int i = 0; i < NOBJ && !r; i++)
				if (ids[i] == id)
					ids[i] = NULL;
		}
		break;
	}
}

/* gone clears every slot of t that holds o. */
static void gone(void **t, void *o)
{
	for (int i = 0; i < NOBJ; i++)
		if (t[i] == o)
			t[i] = NULL;
}

#define DESTROY(name, t, fn)                                                                      \
	do {                                                                                      \
		void *o_ = PICK(t);                                                               \
		if (!o_)                                                                          \
			break;                                                                    \
		errno = 0;                                                                        \
		int r_ = fn(o_);                                                                  \
		rc(name, r_);                                                                     \
		if (!r_)                                                                          \
			gone((void **)t, o_);                                                     \
	} while (0)

static void call(void)
{
	struct ibv_wc wc[NWC];
	uint8_t op = u8() % 36;
	errno = 0;
	switch (op) {
	case 0: {
		int i = SLOT(pds);
		pds[i] = ibv_alloc_pd(ctx);
		obj("alloc_pd", pds[i]);
		break;
	}
	case 1: DESTROY("dealloc_pd", pds, ibv_dealloc_pd); break;
	case 2: {
		int cqe;
		switch (u8() % 4) {
		case 0: cqe = (int)val(); break;
		case 1: cqe = -(int)(u8()); break;
		default: cqe = u8();
		}
		struct ibv_comp_channel *ch = PICK(chans);
		int vec = u8() % 4 == 0 ? (int)val() : 0;
		int i = SLOT(cqs);
		cqs[i] = ibv_create_cq(ctx, cqe, NULL, ch, vec);
		printf("create_cq cqe=%d -> %s errno %d\n", cqe, cqs[i] ? "ok" : "NULL", cqs[i] ? 0 : errno);
		break;
	}
	case 3: DESTROY("destroy_cq", cqs, ibv_destroy_cq); break;
	case 4: create_qp(); break;
	case 5: DESTROY("destroy_qp", qps, ibv_destroy_qp); break;
	case 6: modify_qp(); break;
	case 7: post_send(); break;
	case 8: post_recv(0); break;
	case 9: {
		struct ibv_cq *c = PICK(cqs);
		int n = (int)(u8() % (NWC + 3)) - 2;
		if (c)
			rc("poll_cq", ibv_poll_cq(c, n, wc));
		break;
	}
	case 10: {
		struct ibv_cq *c = PICK(cqs);
		int sol = u8() % 2 ? u8() % 2 : (int)val();
		if (c)
			rc("req_notify_cq", ibv_req_notify_cq(c, sol));
		break;
	}
	case 11: reg_mr(); break;
	case 12: DESTROY("dereg_mr", mrs, ibv_dereg_mr); break;
	case 13: {
		struct ibv_pd *pd = PICK(pds);
		if (!pd)
			break;
		int i = SLOT(mws);
		mws[i] = ibv_alloc_mw(pd, u8() % 2 ? 1 + u8() % 2 : u8());
		obj("alloc_mw", mws[i]);
		break;
	}
	case 14: DESTROY("dealloc_mw", mws, ibv_dealloc_mw); break;
	case 15: {
		struct ibv_qp *qp = PICK(qps);
		struct ibv_mw *mw = PICK(mws);
		if (!qp || !mw)
			break;
		struct ibv_mw_bind b = {.wr_id = 1, .send_flags = u8() & 0x1f};
		b.bind_info.mr = PICK(mrs);
		b.bind_info.length = u16();
		b.bind_info.addr = addr(b.bind_info.length);
		b.bind_info.mw_access_flags = u8() % 2 ? u8() & 0x1f : val();
		rc("bind_mw", ibv_bind_mw(qp, mw, &b));
		break;
	}
	case 16: create_ah(); break;
	case 17: DESTROY("destroy_ah", ahs, ibv_destroy_ah); break;
	case 18: {
		struct ibv_pd *pd = PICK(pds);
		if (!pd)
			break;
		struct ibv_srq_init_attr a = {0};
		if (u8() % 2) {
			a.attr.max_wr = u8() % 64;
			a.attr.max_sge = u8() % 8;
			a.attr.srq_limit = u8() % 8;
		} else {
			a.attr.max_wr = val();
			a.attr.max_sge = val();
			a.attr.srq_limit = val();
		}
		int i = SLOT(srqs);
		srqs[i] = ibv_create_srq(pd, &a);
		obj("create_srq", srqs[i]);
		break;
	}
	case 19: {
		struct ibv_srq *s = PICK(srqs);
		if (!s)
			break;
		struct ibv_srq_attr a;
		a.max_wr = val();
		a.max_sge = val();
		a.srq_limit = val();
		int mask = (int)val();
		ret("modify_srq", ibv_modify_srq(s, &a, mask));
		break;
	}
	case 20: DESTROY("destroy_srq", srqs, ibv_destroy_srq); break;
	case 21: post_recv(1); break;
	case 22: {
		int i = SLOT(chans);
		chans[i] = ibv_create_comp_channel(ctx);
		obj("create_comp_channel", chans[i]);
		break;
	}
	case 23: DESTROY("destroy_comp_channel", chans, ibv_destroy_comp_channel); break;
	case 24: {
		struct ibv_device_attr a;
		rc("query_device", ibv_query_device(ctx, &a));
		struct ibv_port_attr p;
		uint8_t port = u8() % 4;
		rc("query_port", ibv_query_port(ctx, port, &p));
		union ibv_gid g;
		port = u8() % 3;
		rc("query_gid", ibv_query_gid(ctx, port, (int)(u8() % 2 ? u8() : val()), &g));
		uint16_t k;
		port = u8() % 3;
		rc("query_pkey", ibv_query_pkey(ctx, port, (int)(u8() % 2 ? u8() : val()), &k));
		break;
	}
	case 25: {
		struct ibv_qp *qp = PICK(qps);
		if (!qp)
			break;
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		int mask = (int)val();
		rc("query_qp", ibv_query_qp(qp, &a, mask, &ia));
		break;
	}
	case 26: {
		struct ibv_srq *s = PICK(srqs);
		struct ibv_srq_attr a;
		if (s)
			rc("query_srq", ibv_query_srq(s, &a));
		break;
	}
	case 27: {
		struct ibv_cq *c = PICK(cqs);
		int cqe = u8() % 2 ? u8() : (int)val();
		if (c)
			rc("resize_cq", ibv_resize_cq(c, cqe));
		break;
	}
	case 28: {
		struct ibv_mr *m = PICK(mrs);
		if (!m)
			break;
		size_t len = u16() % (8192 + 1);
		void *a = (void *)(uintptr_t)addr(len);
		int flags = u8() % 2 ? u8() & 7 : (int)val();
		int access = u8() % 2 ? u8() & 0x1f : (int)val();
		struct ibv_pd *pd = PICK(pds);
		if (!pd && (flags & IBV_REREG_MR_CHANGE_PD))
			break;
		rc("rereg_mr", ibv_rereg_mr(m, flags, pd, a, len, access));
		break;
	}
	default: cm_call(op - 29); break;
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc != 3 || inet_pton(AF_INET, argv[1], &devaddr) != 1)
		return 2;
	FILE *f = fopen(argv[2], "rb");
	static uint8_t data[1 << 16];
	if (!f)
		return 2;
	inlen = fread(data, 1, sizeof(data), f);
	fclose(f);
	in = data;
	buf = aligned_alloc(4096, BUFSZ);
	if (!buf)
		return 2;
	memset(buf, 0, BUFSZ);
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 2;
	ctx = ibv_open_device(l[0]);
	/* Our own GID: the IPv4-mapped one, index 1 on RoCE, 0 on iWARP. */
	if (!ctx || (ibv_query_gid(ctx, 1, 1, &own) && ibv_query_gid(ctx, 1, 0, &own)))
		return 2;
	cmch = rdma_create_event_channel();
	if (!cmch || fcntl(cmch->fd, F_SETFL, fcntl(cmch->fd, F_GETFL) | O_NONBLOCK))
		return 2;
	int n = 0;
	for (; n < MAXCALLS && pos < inlen; n++)
		call();
	/* Tear down in order, each answer printed: what is still in use fails. */
	for (int i = 0; i < NOBJ; i++) {
		if (ids[i])
			rc("end rdma_destroy_id", rdma_destroy_id(ids[i]));
		if (qps[i])
			rc("end destroy_qp", ibv_destroy_qp(qps[i]));
	}
	for (int i = 0; i < NOBJ; i++) {
		if (srqs[i])
			rc("end destroy_srq", ibv_destroy_srq(srqs[i]));
		if (ahs[i])
			rc("end destroy_ah", ibv_destroy_ah(ahs[i]));
		if (mws[i])
			rc("end dealloc_mw", ibv_dealloc_mw(mws[i]));
	}
	for (int i = 0; i < NOBJ; i++) {
		if (mrs[i])
			rc("end dereg_mr", ibv_dereg_mr(mrs[i]));
		if (cqs[i])
			rc("end destroy_cq", ibv_destroy_cq(cqs[i]));
	}
	for (int i = 0; i < NOBJ; i++) {
		if (pds[i])
			rc("end dealloc_pd", ibv_dealloc_pd(pds[i]));
		if (chans[i])
			rc("end destroy_comp_channel", ibv_destroy_comp_channel(chans[i]));
	}
	rdma_destroy_event_channel(cmch);
	rc("end close_device", ibv_close_device(ctx));
	ibv_free_device_list(l);
	printf("done %d\n", n);
	return 0;
}
