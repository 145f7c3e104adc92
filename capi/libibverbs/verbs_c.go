package main

// The C side of the verbs entry points: rdma-core's prototypes (verbs.h), the
// structs programs see, and calls into the Go side (exports.go, srgo_*). The
// definitions live here, in a file without //export, because cgo copies the
// preamble of an exporting file into _cgo_export.c.

/*
#cgo CFLAGS: -O2 -Wall
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <infiniband/verbs.h>
#include "srobj.h"
#include "srexit.h"

// The Go side (exports.go).
extern int srgo_ndevices(void);
extern int srgo_device_name(int i, char *buf, int n, int *iwarp);
extern uint64_t srgo_node_guid(int i);
extern uint32_t srgo_ifindex(int i);
extern int srgo_query_device(int i, struct ibv_device_attr *a);
extern int srgo_query_port(int i, uint8_t port, struct ibv_port_attr *a);
extern int srgo_query_gid(int i, uint32_t port, int index, uint8_t *raw);
extern int srgo_query_pkey(int i, uint8_t port, int index);
extern uintptr_t srgo_alloc_pd(int i, int *err);
extern int srgo_dealloc_pd(uintptr_t h);

// Flat work requests and completions: the C side walks rdma-core's lists and
// unions and the Go side gets plain arrays, crossing once per list.
struct sr_swr {
	uint64_t wr_id, remote_addr, compare_add, swap;
	uint32_t rkey, imm, opcode, flags, num_sge, invalidate_rkey;
	struct ibv_sge *sg;
	uintptr_t ah; // UD: the Go handle of the address handle
	uint32_t remote_qpn, remote_qkey;
	// BIND_MW: the Go handles of the window and the region (0: none), the
	// range's length and the window's rights; remote_addr is the range's
	// address and rkey the window's new R_Key.
	uintptr_t mw, mr;
	uint64_t mw_length;
	uint32_t mw_access;
};
struct sr_rwr {
	uint64_t wr_id;
	uint32_t num_sge;
	struct ibv_sge *sg;
};
struct sr_wc {
	uint64_t wr_id;
	uint32_t status, opcode, byte_len, imm, qp_num, src_qp, flags, pkey_index, invalidated_rkey;
};
struct sr_qpattr {
	uint32_t state, cur_state, path_mtu, qkey, rq_psn, sq_psn, dest_qp_num, access;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint16_t pkey_index;
	uint8_t en_sqd_async_notify, port_num, timeout, retry_cnt, rnr_retry, min_rnr_timer;
	uint8_t max_rd_atomic, max_dest_rd_atomic, sgid_index, hop_limit, traffic_class, sl, is_global;
	uint32_t flow_label;
	uint8_t dgid[16];
};

extern uintptr_t srgo_reg_mr(uintptr_t pd, void *addr, size_t length, uint64_t iova, int access, uint32_t *lkey, int *err);
extern int srgo_dereg_mr(uintptr_t h);
extern uintptr_t srgo_alloc_mw(uintptr_t pd, int type, uint32_t *rkey, int *err);
extern int srgo_dealloc_mw(uintptr_t h);
extern uintptr_t srgo_rereg_mr(uintptr_t h, int flags, uintptr_t pd, void *addr, size_t length, int access,
			       uint32_t *lkey, int *err);
extern uintptr_t srgo_create_cq(int i, int cqe, int wfd, uint64_t cqptr, int *depth, int *err);
extern int srgo_resize_cq(uintptr_t h, int cqe, int *depth);
extern int srgo_req_notify_cq(uintptr_t h, int solicited_only);
extern int srgo_destroy_cq(uintptr_t h);
extern int srgo_poll_cq(uintptr_t h, int n, struct sr_wc *wc, int *more);
extern int srgo_drop_cq_events(int rfd, int wfd, uint64_t ptr);
extern uint64_t srgo_mallocs(void);
extern void *srgo_cq_wake(uintptr_t h);
extern int srgo_lend(uintptr_t h);
extern int srgo_rx(uintptr_t h);
extern int srgo_flush_owed(uintptr_t h);
extern uint64_t srgo_rx_reads(void);
extern uintptr_t srgo_create_srq(uintptr_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit, int *err);
extern int srgo_arm_srq(uintptr_t h, uint32_t limit);
extern int srgo_resize_srq(uintptr_t h, uint32_t max_wr);
extern int srgo_mcast(uintptr_t h, uint8_t *gid, uint16_t lid, int attach);
extern int srgo_destroy_srq(uintptr_t h);
extern int srgo_post_srq_recv(uintptr_t h, struct sr_rwr *w, int n, int *posted);
extern uintptr_t srgo_create_qp(uintptr_t pd, int type, uintptr_t scq, uintptr_t rcq, uintptr_t srq, int sig_all,
				struct sr_qpattr *cap, uint32_t *qpn, int *err);
extern int srgo_modify_qp(uintptr_t h, struct sr_qpattr *a, int mask);
extern int srgo_query_qp(uintptr_t h, struct sr_qpattr *a);
extern int srgo_destroy_qp(uintptr_t h);
extern uintptr_t srgo_create_ah(uintptr_t pd, struct sr_qpattr *a, int *err);
extern int srgo_destroy_ah(uintptr_t h);
extern int srgo_post_send(uintptr_t h, struct sr_swr *w, int n, int *posted);
extern int srgo_post_recv(uintptr_t h, struct sr_rwr *w, int n, int *posted);

// robust_c.go: why a call was refused, under SOFTRDMA_DEBUG.
extern void sr_debug(const char *format, ...);

// Extended CQs and QPs (extended_c.go).
extern struct ibv_cq_ex *sr_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
extern struct ibv_qp *sr_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
extern void sr_qpx_free(void *ext);

// Asynchronous events (async_c.go, async.go).
extern int sr_async_open(struct ibv_context *ctx);
extern void sr_async_close(struct ibv_context *ctx);
extern int srgo_async_watch(uintptr_t h, int kind, void *obj);
extern int srgo_async_forget(void *obj, int kind);

// Signals. A program's handler installed without SA_ONSTACK (perftest's
// SIGALRM for -D) that runs on a thread of the Go runtime runs on a goroutine
// stack and kills the process ("fatal error: fault"). So no Go thread may take
// an asynchronous signal: the first constructor blocks them all on the loading
// thread before the Go runtime's constructor (unprioritized, in go.o, linked
// first) starts the runtime's first thread, which inherits the mask; the
// runtime keeps the mask it started with (initSigmask) for every thread it
// makes, and a c-shared library leaves every blockable signal to it. The last
// constructor (unprioritized, in a cgo object linked after go.o) gives the
// loading thread its mask back. The kernel then delivers process signals only
// to the program's own threads. Synchronous signals stay unblocked.
static sigset_t sr_loader_mask;

// sr_async is what SRGO blocks: every signal but the synchronous ones.
static sigset_t sr_async;

__attribute__((constructor(101))) static void sr_block_async_signals(void)
{
	sigset_t s;
	sr_async_signals(&s);
	sr_async = s;
	pthread_sigmask(SIG_BLOCK, &s, &sr_loader_mask);
}

// sr_sig_risky (libibverbs.so.1, capi/shim/sig.c) is 1 once some asynchronous
// signal has a handler installed without SA_ONSTACK. Without the shim (the
// reference is weak) SRGO always blocks.
extern int sr_sig_risky __attribute__((weak));

static inline int sr_sig_block(void)
{
	return !&sr_sig_risky || __atomic_load_n(&sr_sig_risky, __ATOMIC_RELAXED);
}

// SRGO(f, args...) calls the Go function f, with the asynchronous signals
// blocked on the calling thread, the program's, when the program has a
// handler without SA_ONSTACK (sr_sig_risky): while the thread runs Go code it
// is on a goroutine stack, and such a handler would push its frame there (a
// few KiB with the FPU state) and overwrite the neighbouring goroutine's
// stack (seen: perftest -D, a corrupted roce receive goroutine). A signal
// that arrives meanwhile is delivered when the call returns, on the
// program's stack. Blocking costs two rt_sigprocmask calls per verb, the
// whole gap to softrdma perf's latency, so without such a handler (most
// programs) the call goes straight through. Left open: a thread already
// inside Go, unblocked, when another thread installs such a handler can take
// the signal there until that call returns (the shim sets the flag before
// the handler is installed, so every later call blocks).
#define SRGO(f, ...) ({                                                   \
	__typeof__(f(__VA_ARGS__)) sr_r_;                                 \
	if (sr_sig_block()) {                                             \
		sigset_t sr_old_;                                         \
		pthread_sigmask(SIG_BLOCK, &sr_async, &sr_old_);          \
		sr_r_ = f(__VA_ARGS__);                                   \
		pthread_sigmask(SIG_SETMASK, &sr_old_, NULL);             \
	} else                                                            \
		sr_r_ = f(__VA_ARGS__);                                   \
	sr_r_;                                                            \
})

__attribute__((constructor)) static void sr_restore_signals(void)
{
	pthread_sigmask(SIG_SETMASK, &sr_loader_mask, NULL);
}

// sr_device is what ibv_get_device_list hands out: rdma-core's struct with the
// index of the Go device behind it.
struct sr_device {
	struct ibv_device dev;
	int idx;
};

// sr_context is an open device. verbs_context ends in the ibv_context the
// program gets, and abi_compat says it is extended, so verbs.h's inline
// functions find the ops (query_port, query_device_ex) through it.
struct sr_context {
	int idx;
	int64_t idle_since; // sr_poll_cq: when its polls began to find nothing (0: they found some)
	struct sr_wake *wake; // sr_poll_idle: the engine's futex word (hotpath.go), once known
	struct verbs_context vc;
};

struct sr_pd {
	struct ibv_pd pd;
	uintptr_t h;
};

struct sr_mr {
	struct ibv_mr mr;
	uintptr_t h;
};

struct sr_mw {
	struct ibv_mw mw;
	uintptr_t h;
};

static struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
static int sr_dealloc_mw(struct ibv_mw *mw);
static int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);

// struct sr_cq and struct sr_qp: srobj.h.

struct sr_srq {
	struct ibv_srq srq;
	uintptr_t h;
	struct ibv_srq_attr attr; // what ibv_query_srq reports
};

static int sr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct sr_ah {
	struct ibv_ah ah;
	uintptr_t h;
};

struct sr_channel {
	struct ibv_comp_channel ch;
	int wfd; // the write end of the pipe whose read end is ch.fd
};


static int sr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int sr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int sr_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int sr_req_notify_cq(struct ibv_cq *cq, int solicited_only);

static struct sr_device **sr_devices;
static int sr_ndevices;
static pthread_once_t sr_once = PTHREAD_ONCE_INIT;

static void sr_load(void)
{
	int n = SRGO(srgo_ndevices, );
	if (n <= 0)
		return;
	sr_devices = calloc(n, sizeof(*sr_devices));
	if (!sr_devices)
		return;
	for (int i = 0; i < n; i++) {
		struct sr_device *d = calloc(1, sizeof(*d));
		if (!d)
			return;
		int iwarp = 0;
		SRGO(srgo_device_name, i, d->dev.name, sizeof(d->dev.name), &iwarp);
		d->idx = i;
		d->dev.node_type = iwarp ? IBV_NODE_RNIC : IBV_NODE_CA;
		d->dev.transport_type = iwarp ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB;
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
		snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", d->dev.name);
		sr_devices[i] = d;
		sr_ndevices = i + 1;
	}
}

static struct sr_device *sr_dev(struct ibv_device *dev)
{
	return (struct sr_device *)dev;
}

static struct sr_context *sr_ctx(struct ibv_context *ctx)
{
	struct verbs_context *vc = (struct verbs_context *)((char *)ctx - offsetof(struct verbs_context, context));
	return (struct sr_context *)((char *)vc - offsetof(struct sr_context, vc));
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	pthread_once(&sr_once, sr_load);
	struct ibv_device **l = calloc(sr_ndevices + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < sr_ndevices; i++)
		l[i] = &sr_devices[i]->dev;
	if (num_devices)
		*num_devices = sr_ndevices;
	return l;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (!device)
		return 0;
	return htobe64(SRGO(srgo_node_guid, sr_dev(device)->idx));
}

int ibv_get_device_index(struct ibv_device *device)
{
	return device ? sr_dev(device)->idx : -1;
}

static int sr_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a;
	memset(&a, 0, sizeof(a));
	int rc = SRGO(srgo_query_port, sr_ctx(ctx)->idx, port, &a);
	if (rc)
		return rc;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

static int sr_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			      struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;
	if (input && input->comp_mask)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	SRGO(srgo_query_device, sr_ctx(ctx)->idx, &a.orig_attr);
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags; // as the kernel: the same bits
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;       // as the kernel (ib_uverbs_ex_query_device)
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_context *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->idx = sr_dev(device)->idx;
	c->vc.sz = sizeof(c->vc);
	c->vc.query_port = sr_query_port;
	c->vc.query_device_ex = sr_query_device_ex;
	c->vc.create_cq_ex = sr_create_cq_ex; // extended_c.go
	c->vc.create_qp_ex = sr_create_qp_ex;
	struct ibv_context *ctx = &c->vc.context;
	ctx->device = device;
	ctx->cmd_fd = -1;
	ctx->async_fd = -1;
	ctx->num_comp_vectors = 1;
	ctx->ops.post_send = sr_post_send;
	ctx->ops.post_recv = sr_post_recv;
	ctx->ops.poll_cq = sr_poll_cq;
	ctx->ops.req_notify_cq = sr_req_notify_cq;
	ctx->ops.post_srq_recv = sr_post_srq_recv;
	ctx->ops.alloc_mw = sr_alloc_mw; // verbs.h's inline ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw
	ctx->ops.dealloc_mw = sr_dealloc_mw;
	ctx->ops.bind_mw = sr_bind_mw;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	int err = sr_async_open(ctx);
	if (err) {
		pthread_mutex_destroy(&ctx->mutex);
		free(c);
		errno = err;
		return NULL;
	}
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	if (!ctx)
		return EINVAL;
	struct sr_context *c = sr_ctx(ctx);
	sr_async_close(ctx);
	pthread_mutex_destroy(&ctx->mutex);
	free(c);
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	if (!ctx || !attr)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	SRGO(srgo_query_device, sr_ctx(ctx)->idx, attr);
	return 0;
}

// ibv_query_port is the exported fallback of verbs.h's inline ibv_query_port
// for contexts without the extended op; it fills the old, shorter struct
// (_compat_ibv_port_attr, without port_cap_flags2).
int (ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	if (!ctx || !attr)
		return EINVAL;
	return sr_query_port(ctx, port, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, port_cap_flags2));
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	if (!ctx || !gid)
		return EINVAL;
	if (SRGO(srgo_query_gid, sr_ctx(ctx)->idx, port, index, gid->raw))
		return -1;
	return 0;
}

// ibv_query_gid_type (IBVERBS_PRIVATE_34, driver.h) gives the type of a GID
// table entry: 1 is IBV_GID_TYPE_SYSFS_ROCE_V2 (every RoCE entry, as rxe's),
// 0 IBV_GID_TYPE_SYSFS_IB_ROCE_V1 (iWARP, as siw's).
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	union ibv_gid gid;
	if (!ctx || !type)
		return EINVAL;
	if (SRGO(srgo_query_gid, sr_ctx(ctx)->idx, port, (int)index, gid.raw))
		return -1;
	*type = ctx->device->transport_type == IBV_TRANSPORT_IB ? 1 : 0;
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	if (!ctx || !entry || flags || entry_size < sizeof(*entry))
		return EINVAL;
	memset(entry, 0, sizeof(*entry));
	if (SRGO(srgo_query_gid, sr_ctx(ctx)->idx, port, (int)index, entry->gid.raw))
		return EINVAL;
	for (int i = 0; i < 16; i++)
		if (entry->gid.raw[i])
			goto found;
	return ENODATA;
found:
	entry->gid_index = index;
	entry->port_num = port;
	entry->gid_type = ctx->device->transport_type == IBV_TRANSPORT_IB ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB;
	entry->ndev_ifindex = SRGO(srgo_ifindex, sr_ctx(ctx)->idx);
	return 0;
}

int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	if (!ctx || !pkey)
		return EINVAL;
	int v = SRGO(srgo_query_pkey, sr_ctx(ctx)->idx, port, index);
	if (v < 0)
		return -1;
	*pkey = htobe16((uint16_t)v);
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	if (!ctx) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_pd *p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	int err = 0;
	p->h = SRGO(srgo_alloc_pd, sr_ctx(ctx)->idx, &err);
	if (!p->h) {
		free(p);
		errno = err;
		return NULL;
	}
	p->pd.context = ctx;
	p->pd.handle = (uint32_t)p->h;
	return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	struct sr_pd *p = (struct sr_pd *)pd;
	int rc = SRGO(srgo_dealloc_pd, p->h);
	if (rc)
		return rc;
	free(p);
	return 0;
}

static struct ibv_mr *sr_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	int err = 0;
	uint32_t key = 0;
	m->h = SRGO(srgo_reg_mr, ((struct sr_pd *)pd)->h, addr, length, iova, (int)access, &key, &err);
	if (!m->h) {
		free(m);
		errno = err;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = key;
	m->mr.lkey = key;
	m->mr.rkey = key;
	return &m->mr;
}

// ibv_reg_mr registers [addr, addr+length) at its own virtual address: what the
// program sends its peer is its own pointer (ibv_reg_mr's semantics).
struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return sr_reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return sr_reg_mr(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	return sr_reg_mr(pd, addr, length, iova, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (!mr)
		return EINVAL;
	struct sr_mr *m = (struct sr_mr *)mr;
	int rc = SRGO(srgo_dereg_mr, m->h);
	if (rc)
		return rc;
	free(m);
	return 0;
}

// sr_alloc_mw allocates a memory window (ibv_alloc_mw) on a device that
// offers them (IBV_DEVICE_MEM_WINDOW: RoCE, as rxe; siw has none, and
// libibverbs answers EOPNOTSUPP for it).
static struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct ibv_device_attr da;
	memset(&da, 0, sizeof(da));
	SRGO(srgo_query_device, sr_ctx(pd->context)->idx, &da);
	if (!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW)) {
		sr_debug("alloc mw: the device has no memory windows (as siw)");
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct sr_mw *w = calloc(1, sizeof(*w));
	if (!w) {
		errno = ENOMEM;
		return NULL;
	}
	int err = 0;
	uint32_t rkey = 0;
	w->h = SRGO(srgo_alloc_mw, ((struct sr_pd *)pd)->h, (int)type, &rkey, &err);
	if (!w->h) {
		free(w);
		errno = err;
		return NULL;
	}
	w->mw.context = pd->context;
	w->mw.pd = pd;
	w->mw.rkey = rkey;
	w->mw.handle = rkey;
	w->mw.type = type;
	return &w->mw;
}

static int sr_dealloc_mw(struct ibv_mw *mw)
{
	struct sr_mw *w = (struct sr_mw *)mw;
	int rc = SRGO(srgo_dealloc_mw, w->h);
	if (rc)
		return rc;
	free(w);
	return 0;
}

// sr_bind_mw binds a type 1 window (ibv_bind_mw; verbs.h's inline refuses
// the other type) by posting a BIND_MW work request with the window's next
// key, which it stores in mw->rkey once posted, as rxe_bind_mw (rdma-core
// providers/rxe/rxe.c) does; a bind that fails later completes with
// IBV_WC_MW_BIND_ERR, and the program undoes the key.
static int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mb)
{
	struct ibv_mw_bind_info *b = &mb->bind_info;
	int rc = 0;
	if (!b->mr && (b->addr || b->length)) {
		sr_debug("bind mw: a range without a region");
		rc = EINVAL;
	} else if (b->mw_access_flags & IBV_ACCESS_ZERO_BASED) {
		sr_debug("bind mw: a zero-based type 1 window");
		rc = EINVAL;
	} else if (b->mr && b->mr->pd != mw->pd) {
		sr_debug("bind mw: the region and the window are in different PDs");
		rc = EPERM;
	}
	if (!rc) {
		struct ibv_send_wr wr, *bad;
		memset(&wr, 0, sizeof(wr));
		wr.opcode = IBV_WR_BIND_MW;
		wr.wr_id = mb->wr_id;
		wr.send_flags = mb->send_flags;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
		wr.bind_mw.bind_info = *b;
		rc = qp->context->ops.post_send(qp, &wr, &bad);
		if (!rc)
			mw->rkey = wr.bind_mw.rkey;
	}
	if (rc)
		errno = rc;
	return rc;
}

// ibv_rereg_mr registers mr again with another PD, other access flags or
// other memory (rereg.go) and returns 0 or an enum ibv_rereg_mr_err_code
// with errno set, as rdma-core's: IBV_REREG_MR_ERR_INPUT for what libibverbs
// itself refuses (unknown flags, CHANGE_TRANSLATION without an address or a
// length, access flags without CHANGE_ACCESS; and here a NULL mr, or a NULL
// PD with CHANGE_PD, on which rdma-core would crash), IBV_REREG_MR_ERR_CMD
// for what the kernel refuses (no flags, a PD of another context, and every
// refusal of the new registration, the reg_mr errno's), the old registration
// then still in place.
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
		sr_debug("ibv_rereg_mr: flags 0x%x, pd %p, addr %p, length %zu, access 0x%x: invalid input",
			 flags, (void *)pd, addr, length, access);
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	struct ibv_pd *npd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
	if (!flags || npd->context != mr->context) {
		sr_debug("ibv_rereg_mr: %s", !flags ? "no flags" : "a PD of another context");
		errno = EINVAL;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (!(flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
		addr = mr->addr;
		length = mr->length;
	}
	struct sr_mr *m = (struct sr_mr *)mr;
	int err = 0;
	uint32_t key = 0;
	uintptr_t h = SRGO(srgo_rereg_mr, m->h, flags, ((struct sr_pd *)npd)->h, addr, length, access, &key, &err);
	if (!h) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	m->h = h;
	mr->pd = npd;
	mr->addr = addr;
	mr->length = length;
	mr->handle = mr->lkey = mr->rkey = key;
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	if (!ctx) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_cq *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	// ib_uverbs_create_cq: a vector the device does not have is -EINVAL.
	if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) {
		sr_debug("create cq: comp_vector %d: the device has %d", comp_vector, ctx->num_comp_vectors);
		free(c);
		errno = EINVAL;
		return NULL;
	}
	int err = 0, depth = 0;
	int wfd = channel ? ((struct sr_channel *)channel)->wfd : -1;
	c->h = SRGO(srgo_create_cq, sr_ctx(ctx)->idx, cqe, wfd, (uint64_t)(uintptr_t)&c->cq, &depth, &err);
	if (!c->h) {
		free(c);
		errno = err;
		return NULL;
	}
	if (channel) {
		pthread_mutex_lock(&ctx->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	c->cq.channel = channel;
	c->cq.context = ctx;
	c->cq.cq_context = cq_context;
	c->cq.cqe = depth;
	c->cq.handle = (uint32_t)c->h;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	SRGO(srgo_async_watch, c->h, 2, &c->cq);
	return &c->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	if (!cq)
		return EINVAL;
	struct sr_cq *c = (struct sr_cq *)cq;
	int rc = SRGO(srgo_destroy_cq, c->h);
	if (rc)
		return rc;
	SRGO(srgo_async_forget, cq, 2);
	if (cq->channel) {
		struct sr_channel *ch = (struct sr_channel *)cq->channel;
		SRGO(srgo_drop_cq_events, ch->ch.fd, ch->wfd, (uint64_t)(uintptr_t)cq);
		pthread_mutex_lock(&cq->context->mutex);
		cq->channel->refcnt--;
		pthread_mutex_unlock(&cq->context->mutex);
	}
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(c);
	return 0;
}

// ibv_resize_cq changes the number of completions cq holds, keeping those
// waiting (cq_resize.go), and sets cq->cqe to the new depth, as rxe_resize_cq
// does; it returns 0 or an errno. siw has no resize_cq: on iWARP it is
// EOPNOTSUPP, as libibverbs answers for a provider without it.
int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	if (!cq)
		return EINVAL;
	if (cq->context->device->transport_type == IBV_TRANSPORT_IWARP) {
		sr_debug("resize cq: iWARP devices do not resize CQs (siw has no resize_cq): EOPNOTSUPP");
		return EOPNOTSUPP;
	}
	int depth = 0;
	int rc = SRGO(srgo_resize_cq, ((struct sr_cq *)cq)->h, cqe, &depth);
	if (rc)
		return rc;
	cq->cqe = depth;
	return 0;
}

// ibv_ack_cq_events counts acknowledged completion events, as rdma-core's does
// (ibv_destroy_cq's callers wait on the count).
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

#define SR_BATCH 64

// Busy polling. A program that spins on ibv_poll_cq (perftest, most
// benchmarks) would take a whole CPU from the device loop that makes its
// completions; on a host with few CPUs that halves its bandwidth and makes
// its latency the scheduler's time slice. So once the device's CQs have been
// found empty for sr_spin_ns, ibv_poll_cq sleeps on the engine's futex word
// (wakeWord in hotpath.go, bumped at every completion) until a completion
// arrives on any CQ of the device, at most sr_sleep_ns at a time; the first
// completion ends the idle time. It sleeps in C, with the program's signals
// as they are (a handler interrupts the sleep). SOFTRDMA_POLL_SPIN_US and
// SOFTRDMA_POLL_SLEEP_US set them (a negative spin: never sleep).
//
// The spin is 0 by default: an empty poll sleeps at once, as a Go program's
// goroutine blocks on its CQ (softrdma perf). Spinning took the CPU the
// completion needed: the engine's goroutine that receives it, the peer's
// process on the same host. ib_send_lat 64 B on two loopback addresses of a
// 2-CPU host: t_typical 75-82 us with a 20 us spin, 31-39 us without
// (softrdma perf send_lat: 20-25 us); ib_write_bw 64 KiB is no slower.
struct sr_wake {
	uint32_t seq, waiters;
	uint32_t cwaiting, lent; // sharedreads.go: a thread in poll(2) on sock; the reads are the program's
	int32_t sock, cefd;      // the device's socket and the eventfd completions signal, or -1
	int64_t last_poll;       // CLOCK_MONOTONIC ns of the last idle poll
	uint32_t owed, pad_;     // srgo_rx left output to the next flush
};

static int64_t sr_spin_ns = 0, sr_sleep_ns = 100000;
static int sr_poll_reads; // SOFTRDMA_POLL_READS, not 0 (sharedreads.go)

// Under SOFTRDMA_STATS=1 the library counts its hot path's calls and says at
// exit how many of them went into the engine (Go): what a program's polling
// loop costs beyond C.
static int sr_stats_on;
static struct {
	uint64_t polls, polls_go;
} sr_stats;

__attribute__((destructor)) static void sr_stats_print(void)
{
	if (!sr_stats_on)
		return;
	fprintf(stderr, "softrdma: ibv_poll_cq: %llu calls, %llu into the engine\n",
		(unsigned long long)sr_stats.polls, (unsigned long long)sr_stats.polls_go);
	fprintf(stderr, "softrdma: Go heap allocations: %llu\n", (unsigned long long)SRGO(srgo_mallocs));
	fprintf(stderr, "softrdma: socket reads by the program's threads: %llu\n", (unsigned long long)SRGO(srgo_rx_reads));
}

__attribute__((constructor)) static void sr_poll_config(void)
{
	const char *v;
	sr_stats_on = (v = getenv("SOFTRDMA_STATS")) && *v;
	sr_poll_reads = !((v = getenv("SOFTRDMA_POLL_READS")) && !strcmp(v, "0"));
	if ((v = getenv("SOFTRDMA_POLL_SPIN_US")) && *v)
		sr_spin_ns = strtoll(v, NULL, 10) * 1000;
	if ((v = getenv("SOFTRDMA_POLL_SLEEP_US")) && *v && strtoll(v, NULL, 10) > 0)
		sr_sleep_ns = strtoll(v, NULL, 10) * 1000;
}

static int64_t sr_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

// sr_poll_seq is the engine's completion count before a poll (0 until known);
// *known says whether it is.
static uint32_t sr_poll_seq(struct ibv_cq *cq, int *known)
{
	struct sr_wake *w = __atomic_load_n(&sr_ctx(cq->context)->wake, __ATOMIC_ACQUIRE);
	*known = w != NULL;
	return w ? __atomic_load_n(&w->seq, __ATOMIC_SEQ_CST) : 0;
}

// sr_poll_go polls cq in the engine, unless the engine's count says nothing
// was added since a poll that left it empty: a program spinning on an empty
// CQ then stays in C, without a call into Go (the runtime's system-call
// bookkeeping, two signal-mask changes, the engine's lock, which the
// goroutine receiving the completion wants). The count is bumped after each
// completion is in its CQ, under the engine's lock, and seq was read before
// the poll: a completion the poll missed moved the count past seq.
static int sr_poll_go(struct ibv_cq *cq, int want, struct sr_wc *w, uint32_t seq, int known)
{
	struct sr_cq *q = (struct sr_cq *)cq;
	if (known && __atomic_load_n(&q->empty_at, __ATOMIC_RELAXED) == seq + 1)
		return 0;
	if (sr_stats_on)
		__atomic_add_fetch(&sr_stats.polls_go, 1, __ATOMIC_RELAXED);
	int more = 1;
	int got = SRGO(srgo_poll_cq, q->h, want, w, &more);
	// A poll that took the CQ's last completion leaves it known empty too:
	// the program's next poll, before anything else completes, stays in C.
	if (known && got >= 0 && !more)
		__atomic_store_n(&q->empty_at, seq + 1, __ATOMIC_RELAXED);
	return got;
}

// sr_wait_socket is sr_poll_idle's wait when the device's reads are the
// program's (sharedreads.go): poll(2) on the device's socket and the
// eventfd completions made elsewhere signal, for at most *t, and datagrams
// found go to the engine from this thread (srgo_rx). It returns 0 if the
// reads are not lent (it asks for them: the next wait may use them), and
// the caller waits on the futex instead.
static int sr_wait_socket(struct sr_wake *k, uintptr_t h, uint32_t seq, int64_t now, const struct timespec *t)
{
	if (!sr_poll_reads)
		return 0;
	__atomic_store_n(&k->last_poll, now, __ATOMIC_RELAXED);
	uint32_t lent = __atomic_load_n(&k->lent, __ATOMIC_ACQUIRE);
	if (lent != 1) {
		if (lent == 0) // 2: never (srgo_lend)
			SRGO(srgo_lend, h);
		return 0;
	}
	int sock = __atomic_load_n(&k->sock, __ATOMIC_RELAXED), cefd = __atomic_load_n(&k->cefd, __ATOMIC_RELAXED);
	if (sock < 0 || cefd < 0)
		return 0;
	if (__atomic_load_n(&k->owed, __ATOMIC_ACQUIRE))
		SRGO(srgo_flush_owed, h);
	__atomic_add_fetch(&k->cwaiting, 1, __ATOMIC_SEQ_CST);
	struct pollfd p[2] = {{.fd = sock, .events = POLLIN}, {.fd = cefd, .events = POLLIN}};
	int n = 0;
	if (__atomic_load_n(&k->seq, __ATOMIC_SEQ_CST) == seq)
		n = ppoll(p, 2, t, NULL);
	__atomic_sub_fetch(&k->cwaiting, 1, __ATOMIC_SEQ_CST);
	if (n > 0 && p[1].revents) {
		uint64_t v;
		if (read(cefd, &v, sizeof(v)) < 0) {
		}
	}
	if (n > 0 && (p[0].revents & POLLIN))
		SRGO(srgo_rx, h);
	else if (n > 0 && (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)))
		// The socket is unusable here (closed, say): wait on the futex from
		// now on; the reader goroutine takes the reads back (srgo_lend's
		// active: no wait updates last_poll any more).
		__atomic_store_n(&k->lent, 2, __ATOMIC_RELEASE);
	__atomic_store_n(&k->last_poll, sr_now(), __ATOMIC_RELAXED);
	return 1;
}

// sr_poll_idle follows a first poll of cq that found got completions, seq
// being sr_poll_seq before it: it keeps the context's idle time, and once
// that is long enough sleeps until the engine's count moves from seq (a
// completion added since the poll, which then polls again) or sr_sleep_ns
// pass. It returns the completions now in w.
static int sr_poll_idle(struct ibv_cq *cq, int want, struct sr_wc *w, int got, uint32_t seq)
{
	struct sr_context *c = sr_ctx(cq->context);
	uintptr_t h = ((struct sr_cq *)cq)->h;
	if (got != 0 || want == 0) {
		if (got > 0 && __atomic_load_n(&c->idle_since, __ATOMIC_RELAXED))
			__atomic_store_n(&c->idle_since, 0, __ATOMIC_RELAXED);
		return got;
	}
	struct sr_wake *k = __atomic_load_n(&c->wake, __ATOMIC_ACQUIRE);
	if (!k) {
		// Known from now on (sr_poll_go's skip and the sleep use it); this
		// poll's seq was not, so no sleep yet.
		__atomic_store_n(&c->wake, (struct sr_wake *)SRGO(srgo_cq_wake, h), __ATOMIC_RELEASE);
		return 0;
	}
	if (sr_spin_ns < 0)
		return 0;
	int64_t now = sr_now(), since = __atomic_load_n(&c->idle_since, __ATOMIC_RELAXED);
	if (!since) {
		__atomic_store_n(&c->idle_since, now, __ATOMIC_RELAXED);
		return 0;
	}
	if (now - since < sr_spin_ns)
		return 0;
	struct timespec t = {.tv_sec = sr_sleep_ns / 1000000000, .tv_nsec = sr_sleep_ns % 1000000000};
	if (sr_wait_socket(k, h, seq, now, &t))
		goto woken;
	__atomic_add_fetch(&k->waiters, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &k->seq, FUTEX_WAIT_PRIVATE, seq, &t, NULL, 0);
	__atomic_sub_fetch(&k->waiters, 1, __ATOMIC_SEQ_CST);
woken:;
	uint32_t now_seq = __atomic_load_n(&k->seq, __ATOMIC_SEQ_CST);
	if (now_seq == seq)
		return 0; // the time is up (or a signal): the program's loop runs again
	got = sr_poll_go(cq, want, w, now_seq, 1);
	if (got > 0)
		__atomic_store_n(&c->idle_since, 0, __ATOMIC_RELAXED);
	return got;
}

static int sr_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct sr_wc w[SR_BATCH];
	int total = 0;
	if (sr_stats_on)
		__atomic_add_fetch(&sr_stats.polls, 1, __ATOMIC_RELAXED);
	if (n <= 0)
		return 0; // rxe_poll_cq (rdma-core providers/rxe/rxe.c): none asked, none polled
	if (!wc)
		return -1;
	while (total < n) {
		int want = n - total < SR_BATCH ? n - total : SR_BATCH;
		int known = 0;
		uint32_t seq = total == 0 ? sr_poll_seq(cq, &known) : 0;
		int got = sr_poll_go(cq, want, w, seq, known);
		if (total == 0)
			got = sr_poll_idle(cq, want, w, got, seq);
		if (got < 0)
			return total ? total : -1;
		for (int i = 0; i < got; i++) {
			struct ibv_wc *o = &wc[total + i];
			memset(o, 0, sizeof(*o));
			o->wr_id = w[i].wr_id;
			o->status = w[i].status;
			o->opcode = w[i].opcode;
			o->byte_len = w[i].byte_len;
			if (w[i].flags & IBV_WC_WITH_INV)
				o->invalidated_rkey = w[i].invalidated_rkey;
			else
				o->imm_data = htobe32(w[i].imm);
			o->qp_num = w[i].qp_num;
			o->src_qp = w[i].src_qp;
			o->wc_flags = w[i].flags;
			o->pkey_index = w[i].pkey_index;
		}
		total += got;
		if (got < want)
			break;
	}
	return total;
}

static int sr_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return SRGO(srgo_req_notify_cq, ((struct sr_cq *)cq)->h, solicited_only);
}

// A completion channel is a pipe: the library writes the ibv_cq pointer of each
// completion event (8 bytes, as the kernel writes ib_uverbs_comp_event_desc's
// cq_handle) to its write end; the program reads the other, channel->fd, which
// poll() and epoll watch and which honours O_NONBLOCK.
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	if (!ctx) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_channel *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int fds[2];
	if (pipe2(fds, O_CLOEXEC)) {
		free(c);
		return NULL;
	}
	c->ch.context = ctx;
	c->ch.fd = fds[0];
	c->ch.refcnt = 0;
	c->wfd = fds[1];
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	if (!channel)
		return EINVAL;
	struct sr_channel *c = (struct sr_channel *)channel;
	pthread_mutex_lock(&channel->context->mutex);
	int busy = channel->refcnt;
	pthread_mutex_unlock(&channel->context->mutex);
	if (busy) {
		sr_debug("destroy comp channel: %d CQs still use it", busy);
		return EBUSY;
	}
	close(c->ch.fd);
	close(c->wfd);
	free(c);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	uint64_t ptr;
	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	if (read(channel->fd, &ptr, sizeof(ptr)) != sizeof(ptr))
		return -1;
	*cq = (struct ibv_cq *)(uintptr_t)ptr;
	*cq_context = (*cq)->cq_context;
	return 0;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	if (!pd || !a || !a->send_cq || !a->recv_cq) {
		sr_debug("create qp: %s", !pd ? "no PD" : !a ? "no attributes" : "missing CQ (send_cq and recv_cq are required)");
		errno = EINVAL;
		return NULL;
	}
	struct sr_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	struct sr_qpattr cap = {
		.max_send_wr = a->cap.max_send_wr, .max_recv_wr = a->cap.max_recv_wr,
		.max_send_sge = a->cap.max_send_sge, .max_recv_sge = a->cap.max_recv_sge,
		.max_inline = a->cap.max_inline_data,
	};
	int err = 0;
	uint32_t qpn = 0;
	q->h = SRGO(srgo_create_qp, ((struct sr_pd *)pd)->h, a->qp_type, ((struct sr_cq *)a->send_cq)->h,
		    ((struct sr_cq *)a->recv_cq)->h, a->srq ? ((struct sr_srq *)a->srq)->h : 0,
		    a->sq_sig_all, &cap, &qpn, &err);
	if (!q->h) {
		free(q);
		errno = err;
		return NULL;
	}
	a->cap.max_send_wr = cap.max_send_wr;
	a->cap.max_recv_wr = cap.max_recv_wr;
	a->cap.max_send_sge = cap.max_send_sge;
	a->cap.max_recv_sge = cap.max_recv_sge;
	a->cap.max_inline_data = cap.max_inline;
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.srq = a->srq;
	q->qp.handle = qpn;
	q->qp.qp_num = qpn;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = a->qp_type;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	SRGO(srgo_async_watch, q->h, 1, &q->qp);
	return &q->qp;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	if (!qp)
		return EINVAL;
	struct sr_qp *q = (struct sr_qp *)qp;
	int rc = SRGO(srgo_destroy_qp, q->h);
	if (rc)
		return rc;
	SRGO(srgo_async_forget, qp, 1);
	sr_qpx_free(q->ext);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(q);
	return 0;
}

// ibv_attach_mcast and ibv_detach_mcast: mcast.go (srgo_mcast).
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return SRGO(srgo_mcast, ((struct sr_qp *)qp)->h, (uint8_t *)gid->raw, lid, 1);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return SRGO(srgo_mcast, ((struct sr_qp *)qp)->h, (uint8_t *)gid->raw, lid, 0);
}

static void sr_from_ah_attr(struct sr_qpattr *o, const struct ibv_ah_attr *a)
{
	o->is_global = a->is_global;
	o->sgid_index = a->grh.sgid_index;
	o->hop_limit = a->grh.hop_limit;
	o->traffic_class = a->grh.traffic_class;
	o->flow_label = a->grh.flow_label;
	o->sl = a->sl;
	o->port_num = a->port_num;
	memcpy(o->dgid, a->grh.dgid.raw, 16);
}

// sr_check_av checks an address as the kernel does before a QP or an AH takes
// it: its port must be one the device has (uverbs_cmd.c modify_qp and
// ib_uverbs_create_ah: rdma_is_port_valid, -EINVAL; the device has port 1),
// and its source GID an entry of the table (rdma_fill_sgid_attr ->
// rdma_get_gid_attr: an index beyond the table -EINVAL, an empty entry
// -ENODATA). It returns 0 or the errno.
static int sr_check_av(struct ibv_context *ctx, const struct ibv_ah_attr *a, const char *what)
{
	if (a->port_num != 1) {
		sr_debug("%s: address on port %u: the device has port 1", what, a->port_num);
		return EINVAL;
	}
	if (!a->is_global)
		return 0; // refused later: RoCE needs the GRH
	union ibv_gid g;
	if (SRGO(srgo_query_gid, sr_ctx(ctx)->idx, 1, a->grh.sgid_index, g.raw)) {
		sr_debug("%s: sgid_index %u beyond the GID table", what, a->grh.sgid_index);
		return EINVAL;
	}
	static const uint8_t zero[16];
	if (!memcmp(g.raw, zero, 16)) {
		sr_debug("%s: sgid_index %u is an empty GID table entry", what, a->grh.sgid_index);
		return ENODATA;
	}
	return 0;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	int bad_av = sr_check_av(pd->context, attr, "create ah");
	if (bad_av) {
		errno = bad_av;
		return NULL;
	}
	struct sr_ah *a = calloc(1, sizeof(*a));
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	struct sr_qpattr q;
	memset(&q, 0, sizeof(q));
	sr_from_ah_attr(&q, attr);
	int err = 0;
	a->h = SRGO(srgo_create_ah, ((struct sr_pd *)pd)->h, &q, &err);
	if (!a->h) {
		free(a);
		errno = err;
		return NULL;
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->ah.handle = (uint32_t)a->h;
	return &a->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	if (!ah)
		return EINVAL;
	struct sr_ah *a = (struct sr_ah *)ah;
	int rc = SRGO(srgo_destroy_ah, a->h);
	if (rc)
		return rc;
	free(a);
	return 0;
}

static void sr_from_qp_attr(struct sr_qpattr *o, const struct ibv_qp_attr *a)
{
	memset(o, 0, sizeof(*o));
	o->state = a->qp_state;
	o->cur_state = a->cur_qp_state;
	o->path_mtu = a->path_mtu;
	o->qkey = a->qkey;
	o->rq_psn = a->rq_psn;
	o->sq_psn = a->sq_psn;
	o->dest_qp_num = a->dest_qp_num;
	o->access = a->qp_access_flags;
	o->pkey_index = a->pkey_index;
	o->en_sqd_async_notify = a->en_sqd_async_notify;
	o->port_num = a->port_num;
	o->timeout = a->timeout;
	o->retry_cnt = a->retry_cnt;
	o->rnr_retry = a->rnr_retry;
	o->min_rnr_timer = a->min_rnr_timer;
	o->max_rd_atomic = a->max_rd_atomic;
	o->max_dest_rd_atomic = a->max_dest_rd_atomic;
	o->is_global = a->ah_attr.is_global;
	o->sgid_index = a->ah_attr.grh.sgid_index;
	o->hop_limit = a->ah_attr.grh.hop_limit;
	o->traffic_class = a->ah_attr.grh.traffic_class;
	o->flow_label = a->ah_attr.grh.flow_label;
	o->sl = a->ah_attr.sl;
	memcpy(o->dgid, a->ah_attr.grh.dgid.raw, 16);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if (!qp || !attr)
		return EINVAL;
	// ibv_cmd_modify_qp (libibverbs/cmd.c): from IBV_QP_RATE_LIMIT up the
	// attributes need the extended command, EOPNOTSUPP.
	if (mask & ~(IBV_QP_RATE_LIMIT - 1)) {
		sr_debug("modify qp 0x%x: attr_mask 0x%x: bits from IBV_QP_RATE_LIMIT up not supported", qp->qp_num, mask);
		return EOPNOTSUPP;
	}
	int bad_av = (mask & IBV_QP_AV) ? sr_check_av(qp->context, &attr->ah_attr, "modify qp") : 0;
	if (!bad_av && (mask & IBV_QP_ALT_PATH))
		bad_av = sr_check_av(qp->context, &attr->alt_ah_attr, "modify qp: alternate path");
	if (bad_av)
		return bad_av;
	struct sr_qpattr a;
	sr_from_qp_attr(&a, attr);
	int rc = SRGO(srgo_modify_qp, ((struct sr_qp *)qp)->h, &a, mask);
	if (!rc && (mask & IBV_QP_STATE))
		qp->state = attr->qp_state;
	return rc;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	if (!qp || !attr || !init)
		return EINVAL;
	struct sr_qpattr a;
	memset(&a, 0, sizeof(a));
	int rc = SRGO(srgo_query_qp, ((struct sr_qp *)qp)->h, &a);
	if (rc)
		return rc;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = a.state;
	attr->cur_qp_state = a.state;
	attr->path_mtu = a.path_mtu;
	attr->qkey = a.qkey;
	attr->rq_psn = a.rq_psn;
	attr->sq_psn = a.sq_psn;
	attr->dest_qp_num = a.dest_qp_num;
	attr->qp_access_flags = a.access;
	attr->pkey_index = a.pkey_index;
	attr->port_num = a.port_num;
	attr->timeout = a.timeout;
	attr->retry_cnt = a.retry_cnt;
	attr->rnr_retry = a.rnr_retry;
	attr->min_rnr_timer = a.min_rnr_timer;
	attr->max_rd_atomic = a.max_rd_atomic;
	attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
	attr->ah_attr.is_global = 1;
	attr->ah_attr.port_num = 1;
	attr->ah_attr.grh.sgid_index = a.sgid_index;
	attr->ah_attr.grh.hop_limit = a.hop_limit;
	attr->ah_attr.grh.traffic_class = a.traffic_class;
	attr->ah_attr.grh.flow_label = a.flow_label;
	attr->ah_attr.sl = a.sl;
	memcpy(attr->ah_attr.grh.dgid.raw, a.dgid, 16);
	attr->cap.max_send_wr = a.max_send_wr;
	attr->cap.max_recv_wr = a.max_recv_wr;
	attr->cap.max_send_sge = a.max_send_sge;
	attr->cap.max_recv_sge = a.max_recv_sge;
	attr->cap.max_inline_data = a.max_inline;
	memset(init, 0, sizeof(*init));
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->srq = qp->srq;
	init->qp_type = qp->qp_type;
	init->cap = attr->cap;
	qp->state = a.state;
	return 0;
}

static int sr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	// rxe_post_send (rdma-core providers/rxe/rxe.c): EINVAL without a
	// bad_wr or a list.
	if (!bad || !wr) {
		sr_debug("post send qp 0x%x: %s is NULL", qp->qp_num, !bad ? "bad_wr" : "the WR list");
		return EINVAL;
	}
	*bad = NULL;
	struct sr_swr a[SR_BATCH];
	uintptr_t h = ((struct sr_qp *)qp)->h;
	while (wr) {
		struct ibv_send_wr *first = wr;
		int n = 0;
		for (; wr && n < SR_BATCH; wr = wr->next, n++) {
			struct sr_swr *o = &a[n];
			memset(o, 0, sizeof(*o));
			o->wr_id = wr->wr_id;
			o->opcode = wr->opcode;
			o->flags = wr->send_flags;
			o->num_sge = (uint32_t)wr->num_sge; // negative: above any max_sge, as in rxe
			o->sg = wr->sg_list;
			switch (wr->opcode) {
			case IBV_WR_SEND_WITH_INV:
			case IBV_WR_LOCAL_INV:
				o->invalidate_rkey = wr->invalidate_rkey;
				break;
			default:
				o->imm = be32toh(wr->imm_data);
			}
			if (wr->opcode == IBV_WR_BIND_MW) {
				struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;
				o->mw = wr->bind_mw.mw ? ((struct sr_mw *)wr->bind_mw.mw)->h : 0;
				o->mr = b->mr ? ((struct sr_mr *)b->mr)->h : 0;
				o->remote_addr = b->addr;
				o->mw_length = b->length;
				o->mw_access = b->mw_access_flags;
				o->rkey = wr->bind_mw.rkey;
				continue;
			}
			if (qp->qp_type == IBV_QPT_UD) {
				o->ah = wr->wr.ud.ah ? ((struct sr_ah *)wr->wr.ud.ah)->h : 0;
				o->remote_qpn = wr->wr.ud.remote_qpn;
				o->remote_qkey = wr->wr.ud.remote_qkey;
				continue;
			}
			switch (wr->opcode) {
			case IBV_WR_ATOMIC_CMP_AND_SWP:
			case IBV_WR_ATOMIC_FETCH_AND_ADD:
				o->remote_addr = wr->wr.atomic.remote_addr;
				o->rkey = wr->wr.atomic.rkey;
				o->compare_add = wr->wr.atomic.compare_add;
				o->swap = wr->wr.atomic.swap;
				break;
			default:
				o->remote_addr = wr->wr.rdma.remote_addr;
				o->rkey = wr->wr.rdma.rkey;
			}
		}
		int posted = 0;
		int rc = SRGO(srgo_post_send, h, a, n, &posted);
		if (rc) {
			struct ibv_send_wr *b = first;
			for (int i = 0; i < posted && b; i++)
				b = b->next;
			if (bad)
				*bad = b;
			return rc;
		}
	}
	return 0;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	if (!pd || !a) {
		errno = EINVAL;
		return NULL;
	}
	// rxe_srq_chk_init (rxe_srq.c): more SGEs than the device's
	// max_srq_sge is -EINVAL. The engine knows one SGE limit (max_sge,
	// larger on rxe), so the device's SRQ limit is checked here.
	struct ibv_device_attr da;
	memset(&da, 0, sizeof(da));
	SRGO(srgo_query_device, sr_ctx(pd->context)->idx, &da);
	if (a->attr.max_sge > (uint32_t)da.max_srq_sge) {
		sr_debug("create srq: max_sge %u above the device's max_srq_sge %d", a->attr.max_sge, da.max_srq_sge);
		errno = EINVAL;
		return NULL;
	}
	struct sr_srq *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	int err = 0;
	q->h = SRGO(srgo_create_srq, ((struct sr_pd *)pd)->h, a->attr.max_wr, a->attr.max_sge, a->attr.srq_limit, &err);
	if (!q->h) {
		free(q);
		errno = err;
		return NULL;
	}
	q->attr = a->attr;
	q->srq.context = pd->context;
	q->srq.srq_context = a->srq_context;
	q->srq.pd = pd;
	q->srq.handle = (uint32_t)q->h;
	pthread_mutex_init(&q->srq.mutex, NULL);
	pthread_cond_init(&q->srq.cond, NULL);
	SRGO(srgo_async_watch, q->h, 3, &q->srq);
	return &q->srq;
}

// ibv_modify_srq resizes the SRQ (IBV_SRQ_MAX_WR: IBV_DEVICE_SRQ_RESIZE, as
// rxe) and arms the limit event (IBV_SRQ_LIMIT), a limit above the new depth
// refused before anything changes.
int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	if (!srq || !attr)
		return EINVAL;
	if (mask & ~(IBV_SRQ_LIMIT | IBV_SRQ_MAX_WR))
		return EINVAL;
	struct sr_srq *q = (struct sr_srq *)srq;
	uint32_t depth = mask & IBV_SRQ_MAX_WR ? attr->max_wr : q->attr.max_wr;
	if ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > depth)
		return EINVAL;
	int rc = 0;
	if (mask & IBV_SRQ_MAX_WR) {
		rc = SRGO(srgo_resize_srq, q->h, attr->max_wr);
		if (rc)
			return rc;
		q->attr.max_wr = attr->max_wr;
	}
	if (mask & IBV_SRQ_LIMIT) {
		rc = SRGO(srgo_arm_srq, q->h, attr->srq_limit);
		if (!rc)
			q->attr.srq_limit = attr->srq_limit;
	}
	return rc;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return EINVAL;
	*attr = ((struct sr_srq *)srq)->attr;
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	if (!srq)
		return EINVAL;
	struct sr_srq *q = (struct sr_srq *)srq;
	int rc = SRGO(srgo_destroy_srq, q->h);
	if (rc)
		return rc;
	SRGO(srgo_async_forget, srq, 3);
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(q);
	return 0;
}

// sr_post_recv_list posts a list of receive WRs with post, 64 at a time.
static int sr_post_recv_list(uintptr_t h, int (*post)(uintptr_t, struct sr_rwr *, int, int *),
			     struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sr_rwr a[SR_BATCH];
	while (wr) {
		struct ibv_recv_wr *first = wr;
		int n = 0;
		for (; wr && n < SR_BATCH; wr = wr->next, n++) {
			a[n].wr_id = wr->wr_id;
			a[n].num_sge = (uint32_t)wr->num_sge; // negative: above any max_sge, as in rxe
			a[n].sg = wr->sg_list;
		}
		int posted = 0;
		int rc = SRGO(post, h, a, n, &posted);
		if (rc) {
			struct ibv_recv_wr *b = first;
			for (int i = 0; i < posted && b; i++)
				b = b->next;
			if (bad)
				*bad = b;
			return rc;
		}
	}
	return 0;
}

static int sr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return sr_post_recv_list(((struct sr_srq *)srq)->h, srgo_post_srq_recv, wr, bad);
}

static int sr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	// rxe_post_recv (rdma-core providers/rxe/rxe.c): EINVAL without a
	// bad_wr or a list.
	if (!bad || !wr) {
		sr_debug("post recv qp 0x%x: %s is NULL", qp->qp_num, !bad ? "bad_wr" : "the WR list");
		return EINVAL;
	}
	*bad = NULL;
	return sr_post_recv_list(((struct sr_qp *)qp)->h, srgo_post_recv, wr, bad);
}

// ibv_read_sysfs_file reads dir/file, as rdma-core's does: the bytes read,
// without a trailing newline, NUL-terminated; -1 if it cannot be read.
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[512];
	if (!dir || !file || !buf || size == 0)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n < 0)
		return -1;
	if ((size_t)n == size)
		n--;
	if (n > 0 && buf[n - 1] == '\n')
		n--;
	buf[n] = 0;
	return (int)n;
}

int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {"unknown", "InfiniBand channel adapter", "InfiniBand switch",
		"InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
	if ((int)t < 0 || (size_t)t >= sizeof(s) / sizeof(s[0]))
		return "unknown";
	return s[t];
}

const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = {"no state change (NOP)", "down", "init", "armed", "active", "active defer"};
	if ((int)s < 0 || (size_t)s >= sizeof(n) / sizeof(n[0]))
		return "unknown";
	return n[s];
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((int)status < 0 || (size_t)status >= sizeof(s) / sizeof(s[0]) || !s[status])
		return "unknown";
	return s[status];
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
	static const char *const s[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	if ((int)event < 0 || (size_t)event >= sizeof(s) / sizeof(s[0]) || !s[event])
		return "unknown";
	return s[event];
}

int ibv_dontfork_range(void *base, size_t size)
{
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}

// For librdmacm.so.1 (srcm.h): the Go handle of a QP, the device of a context.
uintptr_t sr_qp_handle(struct ibv_qp *qp)
{
	return qp ? ((struct sr_qp *)qp)->h : 0;
}

int sr_context_index(struct ibv_context *ctx)
{
	return ctx ? sr_ctx(ctx)->idx : -1;
}
*/
import "C"
