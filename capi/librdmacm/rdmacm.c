/*
 * librdmacm.so.1 of softrdma: rdma-core v44's librdmacm API (rdma_cma.h) over
 * the rdma_cm engine of softrdma (package rdmacm), which runs inside
 * libibverbs.so.1 (capi/libibverbs/cm.go).
 *
 * Why thin C forwarding to libibverbs.so.1, not a second Go library: a process
 * can hold one Go runtime (golang/go#18976: two c-shared Go libraries each
 * start a runtime, and fight over signals and threads), and the rdma_cm_id's
 * device must be the engine the program's verbs run on (id->verbs is the
 * program's ibv_context, id->qp a QP ibv_post_send drives). So the engine stays
 * in libibverbs.so.1, which exports srcm_* (srcm.h) in the private version
 * node SOFTRDMA_CM_PRIVATE, and this library links against it. The QP of
 * rdma_create_qp is created with ibv_create_qp of libibverbs.so.1 and handed
 * to the engine's ID (srcm_attach_qp), which moves it through its states.
 *
 * Events: an rdma_event_channel's fd is an eventfd in semaphore mode whose
 * count is the number of the channel's events queued (poll/epoll work on it;
 * O_NONBLOCK set by the program is honoured); rdma_get_cm_event takes an
 * event and its count from the engine, or waits for the fd. IDs created
 * without a channel are synchronous, as in rdma-core: the calls that start an
 * exchange wait for its event.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <infiniband/ib.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "../libibverbs/srcm.h"
#include "debug.h"

#define ERR(e) (errno = (e), -1)

void sr_debug(const char *fmt, ...)
{
	if (!getenv("SOFTRDMA_DEBUG"))
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "softrdma: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

/*
 * SRGO(f, args...) calls the Go engine with the asynchronous signals blocked
 * on the calling thread when the program has a handler without SA_ONSTACK,
 * as libibverbs.so.1 does (verbs_c.go): such a handler must not run on a
 * goroutine stack. sr_sig_risky is libibverbs.so.1's sticky flag
 * (capi/shim/sig.c); without it (the reference is weak) SRGO always blocks.
 * Without such a handler the call goes straight through, saving two
 * rt_sigprocmask calls per call into Go.
 */
extern int sr_sig_risky __attribute__((weak));
static sigset_t sr_async;
static pthread_once_t sr_sig_once = PTHREAD_ONCE_INIT;

static void sr_sig_init(void)
{
	sigfillset(&sr_async);
	sigdelset(&sr_async, SIGSEGV);
	sigdelset(&sr_async, SIGBUS);
	sigdelset(&sr_async, SIGFPE);
	sigdelset(&sr_async, SIGILL);
	sigdelset(&sr_async, SIGTRAP);
	sigdelset(&sr_async, SIGSYS);
}

static inline int sr_sig_block(void)
{
	return !&sr_sig_risky || __atomic_load_n(&sr_sig_risky, __ATOMIC_RELAXED);
}

#define SRGO(f, ...) ({                                                   \
	__typeof__(f(__VA_ARGS__)) sr_r_;                                 \
	if (sr_sig_block()) {                                             \
		sigset_t sr_old_;                                         \
		pthread_once(&sr_sig_once, sr_sig_init);                  \
		pthread_sigmask(SIG_BLOCK, &sr_async, &sr_old_);          \
		sr_r_ = f(__VA_ARGS__);                                   \
		pthread_sigmask(SIG_SETMASK, &sr_old_, NULL);             \
	} else                                                            \
		sr_r_ = f(__VA_ARGS__);                                   \
	sr_r_;                                                            \
})

/* ---- Devices: one open context and one default PD per device ---- */

static pthread_mutex_t sr_dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_device **sr_dev_list;
static int sr_ndev;
static struct ibv_context **sr_ctxs;
static struct ibv_pd **sr_pds;
static int sr_max_rd[64][2]; /* per device: max initiator depth, responder resources */

static int sr_devices_open(void)
{
	if (sr_dev_list)
		return 0;
	sr_dev_list = ibv_get_device_list(&sr_ndev);
	if (!sr_dev_list)
		return -1;
	sr_ctxs = calloc(sr_ndev + 1, sizeof(*sr_ctxs));
	sr_pds = calloc(sr_ndev + 1, sizeof(*sr_pds));
	if (!sr_ctxs || !sr_pds)
		return ERR(ENOMEM);
	return 0;
}

/* sr_device returns device i's context (and its default PD in *pd). */
static struct ibv_context *sr_device(int i, struct ibv_pd **pd)
{
	struct ibv_context *c = NULL;
	pthread_mutex_lock(&sr_dev_mu);
	if (sr_devices_open() == 0 && i >= 0 && i < sr_ndev) {
		if (!sr_ctxs[i]) {
			sr_ctxs[i] = ibv_open_device(sr_dev_list[i]);
			if (sr_ctxs[i]) {
				struct ibv_device_attr a;
				if (i < 64 && ibv_query_device(sr_ctxs[i], &a) == 0) {
					sr_max_rd[i][0] = a.max_qp_init_rd_atom;
					sr_max_rd[i][1] = a.max_qp_rd_atom;
				}
			}
		}
		c = sr_ctxs[i];
		if (c && !sr_pds[i])
			sr_pds[i] = ibv_alloc_pd(c);
		if (pd)
			*pd = sr_pds[i];
	}
	pthread_mutex_unlock(&sr_dev_mu);
	return c;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	pthread_mutex_lock(&sr_dev_mu);
	int rc = sr_devices_open();
	int n = sr_ndev;
	pthread_mutex_unlock(&sr_dev_mu);
	if (rc)
		return NULL;
	struct ibv_context **l = calloc(n + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	int k = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_context *c = sr_device(i, NULL);
		if (c)
			l[k++] = c;
	}
	if (num_devices)
		*num_devices = k;
	return l;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

/* ---- Event channels and IDs ---- */

struct sr_chan {
	struct rdma_event_channel ch;
	uintptr_t h;
	int waiters; /* threads in rdma_get_cm_event; sr_chan_mu */
	int closed;  /* rdma_destroy_event_channel was called; sr_chan_mu */
};

/* sr_chan_mu guards the channels' waiters and closed. A channel destroyed
 * while a thread waits in rdma_get_cm_event (rping's CM thread, as its main
 * thread returns) keeps its struct and fd, and the thread waits on, as with
 * rdma-core, whose read of the ucma file blocks until the process exits: the
 * thread neither reads freed memory nor returns an error the program exits
 * on. */
static pthread_mutex_t sr_chan_mu = PTHREAD_MUTEX_INITIALIZER;

/* sr_wait_forever is the wait of a thread whose channel was destroyed. */
static void sr_wait_forever(void)
{
	for (;;)
		pause();
}

/* sr_chan_enter counts a waiter in, or waits for ever if the channel is closed. */
static void sr_chan_enter(struct sr_chan *c)
{
	pthread_mutex_lock(&sr_chan_mu);
	int closed = c->closed;
	if (!closed)
		c->waiters++;
	pthread_mutex_unlock(&sr_chan_mu);
	if (closed)
		sr_wait_forever();
}

/* sr_chan_leave counts a waiter out; the last one out of a destroyed channel frees it. */
static void sr_chan_leave(struct sr_chan *c)
{
	pthread_mutex_lock(&sr_chan_mu);
	int last = --c->waiters == 0 && c->closed;
	pthread_mutex_unlock(&sr_chan_mu);
	if (last) {
		close(c->ch.fd);
		free(c);
	}
}

/* sr_chan_closed says whether the channel was destroyed. */
static int sr_chan_closed(struct sr_chan *c)
{
	pthread_mutex_lock(&sr_chan_mu);
	int closed = c->closed;
	pthread_mutex_unlock(&sr_chan_mu);
	return closed;
}

struct sr_cmid {
	struct rdma_cm_id id;
	uintptr_t h;
	int sync;                              /* the channel is the ID's own (created with none) */
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep, passive: the QP of each request */
	uint8_t req_depth, req_resources;      /* a request's initiator depth and responder resources */
	struct ibv_sa_path_rec path;
	int events_completed;                  /* events acknowledged; sr_ev_mu (the engine counts those taken) */
	struct sr_mc *mc_list;                 /* groups joined (rdma_join_multicast); sr_ev_mu */
	struct ibv_ece local_ece, remote_ece;  /* rdma_set_local_ece's; the peer's (none: zero) */
};

/* A group an ID joined: its address, the program's context (the private data
 * of its MULTICAST_JOIN event, as in rdma-core) and its MGID. */
struct sr_mc {
	struct sr_mc *next;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	void *context;
	uint16_t flags; /* join_flags: full or send-only member */
	uint8_t mgid[16];
	int reported; /* its MULTICAST_JOIN was taken */
};

struct sr_event {
	struct rdma_cm_event ev;
	uint8_t private_data[256];
	struct sr_cmid *owner; /* whose count it is: the ID, or for a request the listener */
};

/* sr_ev_mu guards the IDs' event counts; sr_ev_acked is signalled at each
 * rdma_ack_cm_event. As in rdma-core (cma.c: rdma_destroy_id and
 * rdma_migrate_id wait until events_completed reaches the events_reported the
 * kernel returns), an event the program has taken keeps its ID, and its
 * channel, until it is acknowledged. The engine counts the events taken, in
 * the step that takes them, and srcm_destroy_id / srcm_migrate_id return the
 * count: an event being taken on another thread is never missed. */
static pthread_mutex_t sr_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sr_ev_acked = PTHREAD_COND_INITIALIZER;

static struct sr_chan *sr_chan(struct rdma_event_channel *ch)
{
	return (struct sr_chan *)ch;
}

static struct sr_cmid *sr_id(struct rdma_cm_id *id)
{
	return (struct sr_cmid *)id;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct sr_chan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	c->h = SRGO(srcm_create_channel, c->ch.fd);
	if (!c->h) {
		close(c->ch.fd);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	return &c->ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct sr_chan *c = sr_chan(channel);
	SRGO(srcm_destroy_channel, c->h);
	pthread_mutex_lock(&sr_chan_mu);
	c->closed = 1;
	int idle = c->waiters == 0;
	pthread_mutex_unlock(&sr_chan_mu);
	if (idle) {
		close(c->ch.fd);
		free(c);
	}
}

/* sr_refresh copies what the engine knows of the ID into its struct: the
 * device (verbs, pd, port), the addresses and the route. */
static void sr_refresh(struct sr_cmid *c)
{
	struct srcm_info in;
	memset(&in, 0, sizeof(in));
	if (SRGO(srcm_info, c->h, &in))
		return;
	if (in.dev >= 0 && !c->id.verbs) {
		struct ibv_pd *pd = NULL;
		c->id.verbs = sr_device(in.dev, &pd);
		if (!c->id.pd)
			c->id.pd = pd;
		c->id.port_num = 1;
	}
	memcpy(&c->id.route.addr.src_storage, &in.src, sizeof(in.src));
	memcpy(&c->id.route.addr.dst_storage, &in.dst, sizeof(in.dst));
	struct rdma_ib_addr *ib = &c->id.route.addr.addr.ibaddr;
	memcpy(ib->sgid.raw, in.sgid, 16);
	memcpy(ib->dgid.raw, in.dgid, 16);
	ib->pkey = htons(0xffff);
	if (in.dst.ss_family) {
		struct ibv_sa_path_rec *p = &c->path;
		memcpy(p->sgid.raw, in.sgid, 16);
		memcpy(p->dgid.raw, in.dgid, 16);
		p->pkey = htons(0xffff);
		p->hop_limit = 64;
		p->reversible = 1;
		p->numb_path = 1;
		p->mtu_selector = 2;
		p->mtu = IBV_MTU_1024;
		p->rate_selector = 2;
		p->rate = 3;
		p->packet_life_time_selector = 2;
		p->packet_life_time = 18;
		c->id.route.path_rec = p;
		c->id.route.num_paths = 1;
	}
}

static struct sr_cmid *sr_new_id(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
				 enum ibv_qp_type qp_type)
{
	struct sr_cmid *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel) {
			free(c);
			return NULL;
		}
		c->sync = 1;
	}
	int err = 0;
	c->h = SRGO(srcm_create_id, sr_chan(channel)->h, (uint64_t)(uintptr_t)c, (int)ps, &err);
	if (!c->h) {
		if (c->sync)
			rdma_destroy_event_channel(channel);
		free(c);
		errno = err ? err : EINVAL;
		return NULL;
	}
	c->id.channel = channel;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qp_type;
	return c;
}

/* sr_qp_type_of is the QP type of a port space, as librdmacm's
 * rdma_create_id gives it: RC for TCP and IB (the kernel's ucma takes PS_IB
 * with the QP type librdmacm passes), UD for UDP and IPoIB (a port space of
 * its own; on RoCE its QPs have no Q_Key to take: ENODEV at rdma_create_qp,
 * as the kernel's cma_set_default_qkey answers). */
static int sr_qp_type_of(enum rdma_port_space ps, enum ibv_qp_type *t)
{
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_IB:
		*t = IBV_QPT_RC;
		return 0;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		*t = IBV_QPT_UD;
		return 0;
	default:
		sr_debug("rdma_create_id: port space 0x%x not supported (TCP, UDP, IB and IPoIB are)", ps);
		return ERR(EOPNOTSUPP);
	}
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type t;
	if (!id)
		return ERR(EINVAL);
	if (sr_qp_type_of(ps, &t))
		return -1;
	struct sr_cmid *c = sr_new_id(channel, context, ps, t);
	if (!c)
		return -1;
	*id = &c->id;
	return 0;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return ERR(EINVAL);
	struct sr_cmid *c = sr_id(id);
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	int reported = 0;
	SRGO(srcm_destroy_id, c->h, &reported); /* drops the events not taken yet */
	pthread_mutex_lock(&sr_ev_mu);
	while (c->events_completed < reported)
		pthread_cond_wait(&sr_ev_acked, &sr_ev_mu);
	pthread_mutex_unlock(&sr_ev_mu);
	if (c->sync)
		rdma_destroy_event_channel(id->channel);
	while (c->mc_list) {
		struct sr_mc *mc = c->mc_list;
		c->mc_list = mc->next;
		free(mc);
	}
	free(c->qp_init_attr);
	free(c);
	return 0;
}

static int sr_ret(int rc)
{
	return rc ? ERR(rc) : 0;
}

/* sr_complete waits for a synchronous ID's event (rdma-core's ucma_complete):
 * an error status is the call's failure. */
static int sr_complete(struct rdma_cm_id *id)
{
	struct sr_cmid *c = sr_id(id);
	if (!c->sync)
		return 0;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (rdma_get_cm_event(id->channel, &id->event))
		return -1;
	int st = id->event->status;
	if (st) {
		if (id->event->event == RDMA_CM_EVENT_REJECTED)
			return ERR(ECONNREFUSED);
		return ERR(st < 0 ? -st : st);
	}
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr)
		return ERR(EINVAL);
	int rc = SRGO(srcm_bind_addr, sr_id(id)->h, addr);
	if (rc)
		return ERR(rc);
	sr_refresh(sr_id(id));
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	if (!id || !dst_addr)
		return ERR(EINVAL);
	int rc = SRGO(srcm_resolve_addr, sr_id(id)->h, src_addr, dst_addr, timeout_ms);
	if (rc)
		return ERR(rc);
	sr_refresh(sr_id(id));
	return sr_complete(id);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	if (!id)
		return ERR(EINVAL);
	int rc = SRGO(srcm_resolve_route, sr_id(id)->h, timeout_ms);
	if (rc)
		return ERR(rc);
	sr_refresh(sr_id(id));
	return sr_complete(id);
}

/* ---- QPs ---- */

static void sr_destroy_cqs(struct rdma_cm_id *id)
{
	if (id->qp)
		return;
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq == id->recv_cq)
			id->send_cq = NULL;
		id->recv_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel == id->recv_cq_channel)
			id->send_cq_channel = NULL;
		id->recv_cq_channel = NULL;
	}
	if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
		id->send_cq = NULL;
	}
	if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq_channel = NULL;
	}
}

/* sr_create_cqs makes the CQs (with completion channels) a QP created without
 * them uses, as rdma-core's ucma_create_cqs: rdma_get_send_comp and
 * rdma_get_recv_comp wait on them. */
static int sr_create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, recv_size, id, id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, send_size, id, id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	sr_destroy_cqs(id);
	return -1;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	if (!id || !attr)
		return ERR(EINVAL);
	if (id->qp) {
		sr_debug("rdma_create_qp: the ID has a QP already (QP 0x%x)", id->qp->qp_num);
		return ERR(EINVAL);
	}
	if (!id->verbs) {
		sr_debug("rdma_create_qp: the ID has no device yet (bind or resolve its address first)");
		return ERR(EINVAL);
	}
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (attr->comp_mask & ~known) {
		sr_debug("rdma_create_qp_ex: comp_mask 0x%x: only PD, SEND_OPS_FLAGS and CREATE_FLAGS are supported",
			 attr->comp_mask);
		return ERR(EOPNOTSUPP);
	}
	struct ibv_pd *pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL;
	if (!pd)
		pd = id->pd;
	else if (pd->context != id->verbs)
		return ERR(EINVAL);
	if (!pd)
		return ERR(EINVAL);
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return ERR(EINVAL);
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	if (sr_create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
			  attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;

	// As rdma-core's librdmacm (cma.c): the QP is made by ibv_create_qp_ex,
	// so that its send_ops_flags give it the work request builders
	// (ibv_qp_to_qp_ex) and its create_flags are checked.
	struct ibv_qp_init_attr_ex ax = *attr;
	ax.comp_mask |= IBV_QP_INIT_ATTR_PD;
	ax.pd = pd;
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, &ax);
	if (!qp)
		goto err;
	attr->cap = ax.cap;
	int rc = SRGO(srcm_attach_qp, sr_id(id)->h, sr_qp_handle(qp));
	if (rc) {
		ibv_destroy_qp(qp);
		errno = rc;
		goto err;
	}
	/* rdma-core's init_ece: the QP's ECE replaces what rdma_set_local_ece
	 * set, and a device without ECE (rxe, siw, this one: ibv_query_ece is
	 * EOPNOTSUPP) has none. */
	memset(&sr_id(id)->local_ece, 0, sizeof(struct ibv_ece));
	id->pd = pd;
	id->qp = qp;
	return 0;
err:
	rc = errno;
	sr_destroy_cqs(id);
	errno = rc;
	return -1;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !qp_init_attr)
		return ERR(EINVAL);
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	memcpy(&a, qp_init_attr, sizeof(*qp_init_attr));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd ? pd : id->pd;
	int rc = rdma_create_qp_ex(id, &a);
	if (rc)
		return rc;
	memcpy(qp_init_attr, &a, sizeof(*qp_init_attr));
	return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp) {
		SRGO(srcm_release_qp, sr_id(id)->h);
		ibv_destroy_qp(id->qp);
		id->qp = NULL;
	}
	sr_destroy_cqs(id);
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id || !attr || !id->verbs)
		return ERR(EINVAL);
	if (attr->comp_mask & ~IBV_SRQ_INIT_ATTR_PD) {
		sr_debug("rdma_create_srq_ex: comp_mask 0x%x not supported", attr->comp_mask);
		return ERR(EOPNOTSUPP);
	}
	struct ibv_pd *pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd : id->pd;
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof(sa));
	sa.srq_context = attr->srq_context;
	sa.attr = attr->attr;
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (!srq)
		return -1;
	attr->attr = sa.attr;
	id->pd = pd;
	id->srq = srq;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!attr)
		return ERR(EINVAL);
	struct ibv_srq_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	a.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	a.pd = pd;
	int rc = rdma_create_srq_ex(id, &a);
	if (rc == 0)
		attr->attr = a.attr;
	return rc;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
	sr_destroy_cqs(id);
}

/* ---- Connections ---- */

static void sr_param(struct srcm_param *o, struct rdma_cm_id *id, struct rdma_conn_param *p, int depth,
		     int resources)
{
	memset(o, 0, sizeof(*o));
	o->initiator_depth = depth;
	o->responder_resources = resources;
	if (p) {
		o->flow_control = p->flow_control;
		o->retry_count = p->retry_count;
		o->rnr_retry_count = p->rnr_retry_count;
		o->srq = p->srq;
		o->qp_num = p->qp_num;
		if (p->private_data && p->private_data_len) {
			memcpy(o->private_data, p->private_data, p->private_data_len);
			o->private_data_len = p->private_data_len;
		}
	} else {
		o->retry_count = 7;
		o->rnr_retry_count = 7;
	}
	if (id->qp)
		o->qp_num = id->qp->qp_num;
	if (id->srq)
		o->srq = 1;
}

static int sr_dev_index(struct rdma_cm_id *id)
{
	int i = id->verbs ? sr_context_index(id->verbs) : -1;
	return i >= 0 && i < 64 ? i : -1;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	if (!id)
		return ERR(EINVAL);
	int i = sr_dev_index(id);
	int maxd = i >= 0 ? sr_max_rd[i][0] : 0, maxr = i >= 0 ? sr_max_rd[i][1] : 0;
	int depth = maxd, res = maxr;
	if (conn_param) {
		/* RDMA_MAX_INIT_DEPTH and RDMA_MAX_RESP_RES (0xff) are the device's
		 * maximum (rdma-core's ucma_valid_param and rdma_connect). */
		int d = conn_param->initiator_depth, r = conn_param->responder_resources;
		if ((d != RDMA_MAX_INIT_DEPTH && d > maxd) || (r != RDMA_MAX_RESP_RES && r > maxr)) {
			sr_debug("rdma_connect: initiator depth %d / responder resources %d over the device's %d / %d",
				 d, r, maxd, maxr);
			return ERR(EINVAL);
		}
		depth = d == RDMA_MAX_INIT_DEPTH ? maxd : d;
		res = r == RDMA_MAX_RESP_RES ? maxr : r;
	}
	struct srcm_param p;
	sr_param(&p, id, conn_param, depth, res);
	int rc = SRGO(srcm_connect, sr_id(id)->h, &p);
	if (rc)
		return ERR(rc);
	return sr_complete(id);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	if (!id)
		return ERR(EINVAL);
	int rc = SRGO(srcm_listen, sr_id(id)->h, backlog);
	if (rc)
		return ERR(rc);
	sr_refresh(sr_id(id));
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	if (!id)
		return ERR(EINVAL);
	struct sr_cmid *c = sr_id(id);
	int i = sr_dev_index(id);
	int maxd = i >= 0 ? sr_max_rd[i][0] : 0, maxr = i >= 0 ? sr_max_rd[i][1] : 0;
	/* Without conn_param, and for RDMA_MAX_INIT_DEPTH / RDMA_MAX_RESP_RES: the
	 * request's, capped by the device's (rdma-core's rdma_accept). */
	int depth = c->req_depth < maxd ? c->req_depth : maxd;
	int res = c->req_resources < maxr ? c->req_resources : maxr;
	if (conn_param) {
		int d = conn_param->initiator_depth, r = conn_param->responder_resources;
		if ((d != RDMA_MAX_INIT_DEPTH && d > maxd) || (r != RDMA_MAX_RESP_RES && r > maxr)) {
			sr_debug("rdma_accept: initiator depth %d / responder resources %d over the device's %d / %d",
				 d, r, maxd, maxr);
			return ERR(EINVAL);
		}
		if (d != RDMA_MAX_INIT_DEPTH)
			depth = d;
		if (r != RDMA_MAX_RESP_RES)
			res = r;
	}
	struct srcm_param p;
	sr_param(&p, id, conn_param, depth, res);
	int rc = SRGO(srcm_accept, c->h, &p);
	if (rc)
		return ERR(rc);
	if (id->qp_type == IBV_QPT_UD)
		return 0; /* a SIDR reply: no ESTABLISHED follows */
	return sr_complete(id);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	if (!id)
		return ERR(EINVAL);
	return sr_ret(SRGO(srcm_reject, sr_id(id)->h, private_data, private_data ? private_data_len : 0, 0));
}

/* rdma_reject_ece: a REJ with IBTA's reason 35, "vendor option not
 * supported" (rdma-core's reject_with_reason); RoCE's RC REJ carries it, a
 * SIDR reply and iWARP's MPA reject carry no reason. */
int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	if (!id)
		return ERR(EINVAL);
	return sr_ret(SRGO(srcm_reject, sr_id(id)->h, private_data, private_data ? private_data_len : 0, 35));
}

/* The ECE (enhanced connection establishment) values are kept here, as
 * rdma-core's librdmacm keeps them (cma.c), with its checks: the local ones
 * may be set, and the peer's read, only before the ID has a QP. softrdma's
 * devices have no ECE (as rxe and siw: ibv_query_ece is EOPNOTSUPP) and its
 * CM sends and reads none, so the peer's are zero: rdma-core's answer when
 * the peer sent none. */
int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		return ERR(EINVAL);
	struct sr_cmid *c = sr_id(id);
	c->local_ece.vendor_id = ece->vendor_id;
	c->local_ece.options = ece->options;
	return 0;
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return ERR(EINVAL);
	struct sr_cmid *c = sr_id(id);
	ece->vendor_id = c->remote_ece.vendor_id;
	ece->options = c->remote_ece.options;
	ece->comp_mask = 0;
	return 0;
}

/* rdma_notify: the program reports its QP's event (enum ibv_event_type) to
 * the CM; the engine answers as the kernel's rdma_notify (rdmacm.ID.Notify). */
int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	if (!id)
		return ERR(EINVAL);
	return sr_ret(SRGO(srcm_notify, sr_id(id)->h, (int)event));
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	if (!id)
		return ERR(EINVAL);
	return sr_ret(SRGO(srcm_disconnect, sr_id(id)->h));
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	if (!id)
		return ERR(EINVAL);
	struct sr_cmid *c = sr_id(id);
	if (c->sync && !channel) {
		sr_debug("rdma_migrate_id: the ID has no channel of the program's: it needs one (EINVAL)");
		return ERR(EINVAL); /* rdma-core's answer */
	}
	int sync = 0;
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		sync = 1;
	}
	/* The engine moves the ID's queued events at once, as the kernel's
	 * MIGRATE_ID does; then, as rdma-core, the call waits until each event
	 * of the ID the program took is acknowledged, so that none is handled on
	 * the old channel after it returns. */
	int reported = 0;
	int rc = SRGO(srcm_migrate_id, c->h, sr_chan(channel)->h, &reported);
	if (rc) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return ERR(rc);
	}
	if (c->sync) {
		if (id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		rdma_destroy_event_channel(id->channel);
	}
	pthread_mutex_lock(&sr_ev_mu);
	c->sync = sync;
	id->channel = channel;
	while (c->events_completed < reported)
		pthread_cond_wait(&sr_ev_acked, &sr_ev_mu);
	pthread_mutex_unlock(&sr_ev_mu);
	return 0;
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || !optval)
		return ERR(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return ERR(EINVAL);
			return sr_ret(SRGO(srcm_set_tos, sr_id(id)->h, *(uint8_t *)optval));
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			/* Accepted: ports are reused once released; an IPv6
			 * wildcard takes IPv6 only; the ACK timeout is the path's. */
			sr_debug("rdma_set_option: option %d accepted and ignored", optname);
			return 0;
		}
	}
	sr_debug("rdma_set_option: level %d option %d not supported (ENOSYS)", level, optname);
	return ERR(ENOSYS);
}

/* ---- Events ---- */

static void sr_mc_join_event(struct sr_cmid *c, struct rdma_cm_event *ev, const uint8_t *mgid);

static void sr_ah_attr(struct ibv_ah_attr *a, const struct srcm_event *e)
{
	memset(a, 0, sizeof(*a));
	a->is_global = 1;
	a->port_num = 1;
	a->sl = e->ah_sl;
	memcpy(a->grh.dgid.raw, e->ah_dgid, 16);
	a->grh.sgid_index = e->ah_sgid_index;
	a->grh.hop_limit = e->ah_hop_limit;
	a->grh.traffic_class = e->ah_traffic_class;
	a->grh.flow_label = e->ah_flow_label;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return ERR(EINVAL);
	struct sr_chan *ch = sr_chan(channel);
	/* The event's memory first: once taken, an event is counted. */
	struct sr_event *ev = calloc(1, sizeof(*ev));
	if (!ev)
		return ERR(ENOMEM);
	struct srcm_event e;
	/* The engine keeps the fd's count equal to the events queued, and
	 * srcm_next_event takes an event with its count: with none there, a
	 * non-blocking channel says EAGAIN and a blocking one waits on the fd
	 * (another thread, or a destroy that dropped the event, may empty the
	 * queue between the wakeup and the take: then it waits again). */
	sr_chan_enter(ch);
	for (;;) {
		int rc = SRGO(srcm_next_event, ch->h, &e, sizeof(struct sr_cmid), offsetof(struct sr_cmid, h));
		if (rc == 0)
			break;
		if (sr_chan_closed(ch))
			sr_wait_forever();
		int fl = rc == EAGAIN ? fcntl(channel->fd, F_GETFL) : 0;
		if (rc != EAGAIN || fl < 0 || (fl & O_NONBLOCK)) {
			int err = rc != EAGAIN ? rc : fl < 0 ? errno : EAGAIN;
			sr_chan_leave(ch);
			free(ev);
			return ERR(err);
		}
		struct pollfd p = {.fd = channel->fd, .events = POLLIN};
		if (poll(&p, 1, -1) < 0 && errno != EINTR) {
			int err = errno;
			sr_chan_leave(ch);
			free(ev);
			return ERR(err);
		}
	}
	sr_chan_leave(ch);
	struct sr_cmid *c = (struct sr_cmid *)(uintptr_t)e.id;
	struct sr_cmid *l = (struct sr_cmid *)(uintptr_t)e.listen;
	if (e.newh) {
		/* A connection request: the engine made the new ID's struct, with
		 * its handle (set before any other thread can take one of the
		 * connection's own events). */
		c->id.channel = channel;
		if (l) {
			c->id.context = l->id.context;
			c->id.ps = l->id.ps;
			c->id.qp_type = l->id.qp_type;
			if (l->id.pd && l->id.verbs)
				c->id.pd = l->id.pd;
		}
		c->req_depth = e.param.initiator_depth;
		c->req_resources = e.param.responder_resources;
		if (l && l->sync)
			rdma_migrate_id(&c->id, NULL);
	}
	sr_refresh(c);
	/* A request counts against its listener, as in rdma-core. */
	ev->owner = e.newh && l ? l : c;
	ev->ev.id = &c->id;
	ev->ev.listen_id = l ? &l->id : NULL;
	ev->ev.event = e.type;
	ev->ev.status = e.status;
	memcpy(ev->private_data, e.param.private_data, e.param.private_data_len);
	if (e.ud) {
		ev->ev.param.ud.private_data = e.param.private_data_len ? ev->private_data : NULL;
		ev->ev.param.ud.private_data_len = e.param.private_data_len;
		if (e.type == RDMA_CM_EVENT_MULTICAST_JOIN)
			sr_mc_join_event(c, &ev->ev, e.ah_dgid);
		sr_ah_attr(&ev->ev.param.ud.ah_attr, &e);
		ev->ev.param.ud.qp_num = e.ud_qp_num;
		ev->ev.param.ud.qkey = e.ud_qkey;
	} else {
		struct rdma_conn_param *p = &ev->ev.param.conn;
		p->private_data = e.param.private_data_len ? ev->private_data : NULL;
		p->private_data_len = e.param.private_data_len;
		p->responder_resources = e.param.responder_resources;
		p->initiator_depth = e.param.initiator_depth;
		p->flow_control = e.param.flow_control;
		p->retry_count = e.param.retry_count;
		p->rnr_retry_count = e.param.rnr_retry_count;
		p->srq = e.param.srq;
		p->qp_num = e.param.qp_num;
	}
	*event = &ev->ev;
	return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event) {
		sr_debug("rdma_ack_cm_event: the event is NULL");
		return ERR(EINVAL);
	}
	struct sr_event *ev = (struct sr_event *)event;
	pthread_mutex_lock(&sr_ev_mu);
	ev->owner->events_completed++;
	pthread_cond_broadcast(&sr_ev_acked);
	pthread_mutex_unlock(&sr_ev_mu);
	free(event);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	default: return "UNKNOWN EVENT";
	}
}

/* ---- Addresses ---- */

/* sr_addrinfo_from_hints answers rdma_getaddrinfo without a node or service,
 * as rdma-core's addrinfo.c does: the addresses are the hints' own (a copy of
 * ai_dst_addr and ai_src_addr), with their flags, family, QP type and port
 * space. libfabric's verbs provider asks this way with the address it got
 * from its peer (vrb_get_rdmacm_rai). */
static int sr_addrinfo_from_hints(const struct rdma_addrinfo *h, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	if (!r)
		return ERR(ENOMEM);
	r->ai_flags = h->ai_flags;
	r->ai_family = h->ai_family;
	r->ai_qp_type = h->ai_qp_type;
	r->ai_port_space = h->ai_port_space;
	if (h->ai_dst_addr && h->ai_dst_len) {
		if (!(r->ai_dst_addr = malloc(h->ai_dst_len)))
			goto nomem;
		memcpy(r->ai_dst_addr, h->ai_dst_addr, h->ai_dst_len);
		r->ai_dst_len = h->ai_dst_len;
	}
	if (h->ai_src_addr && h->ai_src_len) {
		if (!(r->ai_src_addr = malloc(h->ai_src_len)))
			goto nomem;
		memcpy(r->ai_src_addr, h->ai_src_addr, h->ai_src_len);
		r->ai_src_len = h->ai_src_len;
	}
	*res = r;
	return 0;
nomem:
	rdma_freeaddrinfo(r);
	return ERR(ENOMEM);
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	if (!res || (!node && !service && !hints))
		return ERR(EINVAL);
	struct rdma_addrinfo h;
	memset(&h, 0, sizeof(h));
	if (hints)
		h = *hints;
	if (!node && !service)
		return sr_addrinfo_from_hints(&h, res);
	struct addrinfo ah, *ai = NULL;
	memset(&ah, 0, sizeof(ah));
	if (h.ai_flags & RAI_PASSIVE)
		ah.ai_flags |= AI_PASSIVE;
	if (h.ai_flags & RAI_NUMERICHOST)
		ah.ai_flags |= AI_NUMERICHOST;
	if (h.ai_family == AF_INET || h.ai_family == AF_INET6)
		ah.ai_family = h.ai_family;
	int udp = h.ai_port_space == RDMA_PS_UDP || h.ai_qp_type == IBV_QPT_UD;
	ah.ai_socktype = udp ? SOCK_DGRAM : SOCK_STREAM;
	int rc = getaddrinfo(node, service, &ah, &ai);
	if (rc)
		return rc;
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	struct sockaddr *sa = malloc(ai->ai_addrlen);
	if (!r || !sa) {
		free(r);
		free(sa);
		freeaddrinfo(ai);
		return ERR(ENOMEM);
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	r->ai_flags = h.ai_flags;
	r->ai_family = ai->ai_family;
	r->ai_qp_type = h.ai_qp_type ? h.ai_qp_type : (udp ? IBV_QPT_UD : IBV_QPT_RC);
	r->ai_port_space = h.ai_port_space ? h.ai_port_space : (udp ? RDMA_PS_UDP : RDMA_PS_TCP);
	if (h.ai_flags & RAI_PASSIVE) {
		r->ai_src_addr = sa;
		r->ai_src_len = ai->ai_addrlen;
	} else {
		r->ai_dst_addr = sa;
		r->ai_dst_len = ai->ai_addrlen;
		if (h.ai_src_addr && h.ai_src_len) {
			r->ai_src_addr = malloc(h.ai_src_len);
			if (r->ai_src_addr) {
				memcpy(r->ai_src_addr, h.ai_src_addr, h.ai_src_len);
				r->ai_src_len = h.ai_src_len;
			}
		}
	}
	freeaddrinfo(ai);
	*res = r;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

static __be16 sr_port(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ((const struct sockaddr_in *)sa)->sin_port;
	case AF_INET6:
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	}
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? sr_port(&id->route.addr.src_addr) : 0;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? sr_port(&id->route.addr.dst_addr) : 0;
}

/* ---- Endpoints (rdma_create_ep and friends: synchronous IDs) ---- */

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return ERR(EINVAL);
	if (res->ai_route_len || res->ai_connect_len) {
		sr_debug("rdma_create_ep: ai_route and ai_connect not supported");
		return ERR(EOPNOTSUPP);
	}
	enum ibv_qp_type t;
	if (sr_qp_type_of(res->ai_port_space, &t))
		return -1; /* IPoIB: InfiniBand's, not offered, as on rxe and siw */
	struct sr_cmid *c = sr_new_id(NULL, NULL, res->ai_port_space, res->ai_qp_type);
	if (!c)
		return -1;
	struct rdma_cm_id *cid = &c->id;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cid, res->ai_src_addr))
			goto err;
		if (pd)
			cid->pd = pd;
		if (qp_init_attr) {
			c->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!c->qp_init_attr) {
				errno = ENOMEM;
				goto err;
			}
			*c->qp_init_attr = *qp_init_attr;
			c->qp_init_attr->qp_type = res->ai_qp_type;
		}
		*id = cid;
		return 0;
	}
	if (rdma_resolve_addr(cid, res->ai_src_len ? res->ai_src_addr : NULL, res->ai_dst_addr, 2000))
		goto err;
	if (rdma_resolve_route(cid, 2000))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = res->ai_qp_type;
		if (rdma_create_qp(cid, pd, qp_init_attr))
			goto err;
	}
	*id = cid;
	return 0;
err:;
	int e = errno;
	rdma_destroy_ep(cid);
	errno = e;
	return -1;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	if (!listen || !id)
		return ERR(EINVAL);
	struct sr_cmid *l = sr_id(listen);
	if (!l->sync)
		return ERR(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	int rc = 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		rc = ECONNREFUSED;
	else if (ev->status)
		rc = ev->status < 0 ? -ev->status : ev->status;
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		rc = EINVAL;
	if (!rc && l->qp_init_attr) {
		struct ibv_qp_init_attr a = *l->qp_init_attr;
		if (rdma_create_qp(ev->id, listen->pd, &a))
			rc = errno;
	}
	if (rc) {
		rdma_ack_cm_event(ev);
		return ERR(rc);
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
}

/* ---- A QP the program moves itself (rping -q) ---- */

/* rdma_init_qp_attr gives the attributes that move a QP the program created
 * with the verbs (and names in conn_param->qp_num) to qp_attr->qp_state for
 * the ID's connection (RoCE). */
int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask)
		return ERR(EINVAL);
	return sr_ret(SRGO(srcm_init_qp_attr, sr_id(id)->h, qp_attr, qp_attr_mask));
}

/* rdma_establish completes an active connection after CONNECT_RESPONSE, once
 * the program's QP is in RTS: the RTU goes out. An ID with its own QP is
 * established by rdma_cm (EINVAL, as rdma-core). */
int rdma_establish(struct rdma_cm_id *id)
{
	if (!id || id->qp)
		return ERR(EINVAL);
	return sr_ret(SRGO(srcm_establish, sr_id(id)->h));
}

/* ---- Multicast (UD) ---- */

/* sr_mc_join_event completes a MULTICAST_JOIN event of c, for its first group
 * with this MGID whose event has not been taken yet, as rdma-core's
 * ucma_process_join does: the event's private data is the context given to
 * the join, and the ID's QP, unless the group was joined send-only, is
 * attached to the group. The engine attached the QP the ID had when it
 * joined; this attaches one created since (attaching again is harmless). A
 * failed attach makes the event MULTICAST_ERROR. */
static void sr_mc_join_event(struct sr_cmid *c, struct rdma_cm_event *ev, const uint8_t *mgid)
{
	void *ctx = NULL;
	int sendonly = 0;
	pthread_mutex_lock(&sr_ev_mu);
	for (struct sr_mc *mc = c->mc_list; mc; mc = mc->next) {
		if (!mc->reported && !memcmp(mc->mgid, mgid, 16)) {
			mc->reported = 1;
			ctx = mc->context;
			sendonly = mc->flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
			break;
		}
	}
	pthread_mutex_unlock(&sr_ev_mu);
	ev->param.ud.private_data = ctx;
	if (c->id.qp && !sendonly) {
		union ibv_gid gid;
		memcpy(gid.raw, mgid, 16);
		int rc = ibv_attach_mcast(c->id.qp, &gid, 0);
		if (rc) {
			sr_debug("MULTICAST_JOIN: attaching the ID's QP: %s", strerror(rc));
			ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
			ev->status = -rc;
		}
	}
}

/* sr_addrlen is rdma-core's ucma_addrlen: 0 for a family it does not know. */
static socklen_t sr_addrlen(const struct sockaddr *a)
{
	if (!a)
		return 0;
	switch (a->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	case AF_IB:
		return sizeof(struct sockaddr_ib);
	}
	return 0;
}

static int sr_join(struct rdma_cm_id *id, const struct sockaddr *addr, socklen_t len, uint16_t flags, void *context)
{
	struct sr_cmid *c = sr_id(id);
	if (addr->sa_family == AF_IB) {
		sr_debug("rdma_join_multicast: AF_IB addresses are InfiniBand's (EOPNOTSUPP)");
		return ERR(EOPNOTSUPP);
	}
	struct sr_mc *mc = calloc(1, sizeof(*mc));
	if (!mc)
		return ERR(ENOMEM);
	memcpy(&mc->addr, addr, len);
	mc->addrlen = len;
	mc->context = context;
	mc->flags = flags;
	if (addr->sa_family == AF_INET) {
		/* RoCEv2's MGID: the IPv4-mapped group address (cma_iboe_set_mgid). */
		mc->mgid[10] = mc->mgid[11] = 0xff;
		memcpy(&mc->mgid[12], &((const struct sockaddr_in *)addr)->sin_addr, 4);
	} else {
		memcpy(mc->mgid, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
	}
	pthread_mutex_lock(&sr_ev_mu);
	mc->next = c->mc_list;
	c->mc_list = mc;
	pthread_mutex_unlock(&sr_ev_mu);
	int rc = SRGO(srcm_join_mcast, c->h, addr, (int)flags);
	if (rc) {
		pthread_mutex_lock(&sr_ev_mu);
		struct sr_mc **pos = &c->mc_list;
		while (*pos != mc)
			pos = &(*pos)->next;
		*pos = mc->next;
		pthread_mutex_unlock(&sr_ev_mu);
		free(mc);
		return ERR(rc);
	}
	return sr_complete(id);
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	socklen_t len = sr_addrlen(addr);
	if (!id || !len)
		return ERR(EINVAL);
	return sr_join(id, addr, len, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

/* The checks are rdma-core's (cma.c rdma_join_multicast_ex). */
int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!id || !attr)
		return ERR(EINVAL);
	if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return ERR(ENOTSUP);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
		return ERR(EINVAL);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) || attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return ERR(EINVAL);
	socklen_t len = sr_addrlen(attr->addr);
	if (!len)
		return ERR(EINVAL);
	return sr_join(id, attr->addr, len, attr->join_flags, context);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	socklen_t len = sr_addrlen(addr);
	if (!id || !len)
		return ERR(EINVAL);
	struct sr_cmid *c = sr_id(id);
	pthread_mutex_lock(&sr_ev_mu);
	struct sr_mc **pos = &c->mc_list;
	while (*pos && memcmp(&(*pos)->addr, addr, len))
		pos = &(*pos)->next;
	struct sr_mc *mc = *pos;
	if (mc)
		*pos = mc->next;
	pthread_mutex_unlock(&sr_ev_mu);
	if (!mc)
		return ERR(EADDRNOTAVAIL);
	int rc = SRGO(srcm_leave_mcast, c->h, addr);
	free(mc);
	return sr_ret(rc);
}
