/*
 * rsockets of softrdma's librdmacm.so.1: the socket calls of rsocket.h over an
 * RC QP, SOCK_STREAM (AF_INET, AF_INET6), written on this library's rdma_cm
 * calls and libibverbs.so.1's verbs, and wire-compatible with rdma-core's
 * rsockets, whose protocol facts (librdmacm/rsocket.c) are these:
 *
 * - The connect request's and reply's private data (40 bytes): version 1,
 *   flags (bit 0: the host is big-endian, bit 1: iomap), credits (big-endian
 *   16 bits: the receive queue's depth), 3 reserved bytes, the iomap size
 *   (scaled), then two SGEs of {be64 addr, be32 rkey, be32 length}: the
 *   target SGL (a ring of 2 entries the peer RDMA-writes credits into) and
 *   the first data buffer (the first half of the receive buffer).
 * - Data is an RDMA WRITE WITH IMMEDIATE into the peer's current target
 *   entry; the immediate (big-endian) is op << 29 | value: op 0 data (value:
 *   the length), 4 SGL (the receive sequence number the sender may reach),
 *   7 control (0 disconnect, 1 keepalive, 2 shutdown).
 * - A receiver gives credits (an SGL message) when half its sequence window
 *   is used or half its buffer is free; with a free half it first
 *   RDMA-writes the half's {addr, rkey, length} (its host's byte order) into
 *   the sender's next target entry, in the same write with immediate.
 * - iWARP has no write with immediate: the write goes without, followed by
 *   a 4-byte inline SEND of the message (host byte order) into a receive
 *   buffer of 4 bytes per receive WR after the data buffer.
 *
 * Waiting: the completion channel and the ID's event channel are pipes and
 * eventfds of this library; a thread waits in poll() on both, without the
 * socket's lock, so that rsend and rrecv on two threads progress.
 * An accepted socket over iWARP sends nothing, not even credits, before the
 * initiator's first message has come: an MPA responder receives a valid
 * FPDU before it sends any (RFC 5044 §7.1.2), and siw as initiator without
 * peer-to-peer mode fails the connection (EINVAL) on FPDUs that come before
 * its own. rdma-core's rsockets give credits as soon as they run, so the
 * initiator always speaks first.
 *
 * SOCK_DGRAM and riomap/riowrite are refused (stubs.c).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <byteswap.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "debug.h"
#include <rdma/rsocket.h>

#define ERR(e) (errno = (e), -1)

/* Protocol constants (rdma-core's values). */
enum {
	RS_OP_DATA = 0,
	RS_OP_SGL = 4,
	RS_OP_IOMAP_SGL = 6,
	RS_OP_CTRL = 7,
};
enum {
	RS_CTRL_DISCONNECT = 0,
	RS_CTRL_KEEPALIVE = 1,
	RS_CTRL_SHUTDOWN = 2,
};
#define RS_MSG(op, v) (((uint32_t)(op) << 29) | (uint32_t)(v))
#define RS_MSG_OP(m) ((uint32_t)(m) >> 29)
#define RS_MSG_VAL(m) ((uint32_t)(m) & 0x1fffffff)
#define RS_WR_RECV (1ULL << 63)
#define RS_WR_MSGSEND (1ULL << 62)
#define RS_CONN_NET 1
#define RS_CONN_IOMAP 2
#define RS_SGL_SIZE 2
#define RS_CTRL_SLOTS 4 /* control messages in flight */
#define RS_SNDLOWAT 2048
#define RS_FIRST_XFER 2048
#define RS_MAX_XFER 65536
#define RS_QP_MIN 16
#define RS_QP_MAX 0xfffe

/* struct rs_wsge is an SGE as rsockets put it on the wire. */
struct rs_wsge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

/* struct rs_conn is the connection's private data. */
struct rs_conn {
	uint8_t version;
	uint8_t flags;
	uint16_t credits; /* big-endian */
	uint8_t reserved[3];
	uint8_t iomap_size;
	struct rs_wsge target_sgl; /* big-endian fields */
	struct rs_wsge data_buf;   /* big-endian fields */
};
_Static_assert(sizeof(struct rs_conn) == 40, "rs_conn is 40 bytes on the wire");

enum rs_state {
	RS_INIT,
	RS_BOUND,
	RS_LISTENING,
	RS_RESOLVING_ADDR,
	RS_RESOLVING_ROUTE,
	RS_CONNECTING,
	RS_ACCEPTING,
	RS_CONNECTED,
	RS_DISCONNECTED,
	RS_CONNECT_ERROR,
	RS_ERROR,
};

static int rs_opening(int st)
{
	return st >= RS_RESOLVING_ADDR && st <= RS_ACCEPTING;
}

struct rs_rmsg {
	uint32_t op, len;
};

/* struct rsk is one rsocket; mu guards all of it. */
struct rsk {
	pthread_mutex_t mu;
	int fd; /* the socket's number: its event channel's fd */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	int state;
	int rd, wr; /* connected: may still receive / send */
	int err;    /* SO_ERROR */
	int nonblock, fdflags;
	int msgsend; /* iWARP: write then an inline send of the message */
	int hold;    /* iWARP responder: nothing goes out before the first message in */
	int swap;    /* the peer's byte order differs: credits go swapped */

	/* Options, set before the connection's buffers exist. */
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline, iomap_size;
	uint64_t so_opts, tcp_opts, ipv6_opts;
	int keepalive_time, tos;

	/* A listener's connections, accepted but not yet taken by raccept. */
	struct rsk **pend;
	int npend, cappend;

	/* The connection. */
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	int armed;
	unsigned unacked;
	uint8_t *sbuf;
	struct ibv_mr *smr;
	uint32_t soff; /* where the next send copy goes in sbuf */
	int savail;    /* send buffer bytes free */
	int sqe_avail;
	unsigned ctrl_seq, ctrl_max;
	uint16_t sseq_no, sseq_comp, rseq_no, rseq_comp;
	struct rs_wsge *tbuf; /* the target SGL the peer writes (RS_SGL_SIZE) */
	struct ibv_mr *tmr;
	int tidx;
	struct rs_wsge rsgl; /* the peer's target SGL */
	int ridx;
	uint8_t *rbuf; /* rbuf_size of data, then msgsend's 4-byte slots */
	struct ibv_mr *rmr;
	uint32_t roff, rfree;
	int ravail;
	int rslot;
	struct rs_rmsg *rmsg;
	int rhead, rtail;
};

/* Defaults of rdma-core's rsockets (its config files are not read). */
static const uint32_t def_mem = 1 << 17, def_wmem = 1 << 17;
static const uint16_t def_sq = 384, def_rq = 384, def_inline = 64;

static pthread_mutex_t rs_tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rsk **rs_tab;
static int rs_ntab;

static int rs_insert(struct rsk *s)
{
	pthread_mutex_lock(&rs_tab_mu);
	if (s->fd >= rs_ntab) {
		int n = rs_ntab ? rs_ntab : 64;
		while (n <= s->fd)
			n *= 2;
		struct rsk **t = realloc(rs_tab, n * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&rs_tab_mu);
			return ERR(ENOMEM);
		}
		memset(t + rs_ntab, 0, (n - rs_ntab) * sizeof(*t));
		rs_tab = t;
		rs_ntab = n;
	}
	rs_tab[s->fd] = s;
	pthread_mutex_unlock(&rs_tab_mu);
	return 0;
}

static struct rsk *rs_lookup(int fd)
{
	struct rsk *s = NULL;
	pthread_mutex_lock(&rs_tab_mu);
	if (fd >= 0 && fd < rs_ntab)
		s = rs_tab[fd];
	pthread_mutex_unlock(&rs_tab_mu);
	return s;
}

static void rs_remove(struct rsk *s)
{
	pthread_mutex_lock(&rs_tab_mu);
	if (s->fd >= 0 && s->fd < rs_ntab && rs_tab[s->fd] == s)
		rs_tab[s->fd] = NULL;
	pthread_mutex_unlock(&rs_tab_mu);
}

static uint64_t rs_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int rs_set_nonblock_fd(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* rs_new makes a socket with an event channel of its own (its number) and,
 * if inherit, the listener's sizes and options. */
static struct rsk *rs_new(struct rsk *inherit)
{
	struct rsk *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->fd = -1;
	s->ch = rdma_create_event_channel();
	if (!s->ch) {
		free(s);
		return NULL;
	}
	rs_set_nonblock_fd(s->ch->fd);
	s->fd = s->ch->fd;
	if (inherit) {
		s->sbuf_size = inherit->sbuf_size;
		s->rbuf_size = inherit->rbuf_size;
		s->sq_size = inherit->sq_size;
		s->rq_size = inherit->rq_size;
		s->sq_inline = inherit->sq_inline;
		s->iomap_size = inherit->iomap_size;
		s->so_opts = inherit->so_opts;
		s->tcp_opts = inherit->tcp_opts;
		s->ipv6_opts = inherit->ipv6_opts;
		s->keepalive_time = inherit->keepalive_time;
		s->nonblock = inherit->nonblock;
		s->fdflags = inherit->fdflags;
	} else {
		s->sbuf_size = def_wmem;
		s->rbuf_size = def_mem;
		s->sq_size = def_sq;
		s->rq_size = def_rq;
		s->sq_inline = def_inline;
		s->keepalive_time = 7200;
	}
	s->ctrl_max = RS_CTRL_SLOTS;
	return s;
}

/* rs_free releases everything of s but the table entry. */
static void rs_free(struct rsk *s)
{
	for (int i = 0; i < s->npend; i++)
		rs_free(s->pend[i]);
	free(s->pend);
	if (s->cq && s->unacked)
		ibv_ack_cq_events(s->cq, s->unacked);
	if (s->id && s->id->qp)
		rdma_destroy_qp(s->id); /* also the CQ and its channel (the ID's) */
	if (s->smr)
		ibv_dereg_mr(s->smr);
	if (s->rmr)
		ibv_dereg_mr(s->rmr);
	if (s->tmr)
		ibv_dereg_mr(s->tmr);
	free(s->sbuf);
	free(s->rbuf);
	free(s->tbuf);
	free(s->rmsg);
	if (s->id)
		rdma_destroy_id(s->id);
	if (s->ch)
		rdma_destroy_event_channel(s->ch);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* ---- The connection's QP and buffers ---- */

static int rs_post_recv(struct rsk *s)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = RS_WR_RECV;
	if (s->msgsend) {
		wr.wr_id |= (uint64_t)s->rslot;
		sge.addr = (uintptr_t)(s->rbuf + s->rbuf_size + 4 * s->rslot);
		sge.length = 4;
		sge.lkey = s->rmr->lkey;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		if (++s->rslot == s->rq_size)
			s->rslot = 0;
	}
	int rc = ibv_post_recv(s->id->qp, &wr, &bad);
	return rc ? ERR(rc) : 0;
}

/* rs_create_ep makes the connection's CQ, QP and buffers and posts the
 * receives, before the connect request or the accept. */
static int rs_create_ep(struct rsk *s)
{
	struct rdma_cm_id *id = s->id;
	struct ibv_device_attr da;
	uint32_t maxq = RS_QP_MAX;
	if (!ibv_query_device(id->verbs, &da) && (uint32_t)da.max_qp_wr < maxq)
		maxq = da.max_qp_wr;
	if (s->sq_size > maxq)
		s->sq_size = maxq;
	if (s->sq_size < RS_QP_MIN)
		s->sq_size = RS_QP_MIN;
	if (s->rq_size > maxq)
		s->rq_size = maxq;
	if (s->rq_size < RS_QP_MIN)
		s->rq_size = RS_QP_MIN;
	if (id->verbs->device->transport_type == IBV_TRANSPORT_IWARP) {
		s->msgsend = 1;
		if (s->sq_inline < 4)
			s->sq_inline = 4;
	}

	s->cch = ibv_create_comp_channel(id->verbs);
	if (!s->cch)
		return -1;
	rs_set_nonblock_fd(s->cch->fd);
	s->cq = ibv_create_cq(id->verbs, s->sq_size + s->rq_size, s, s->cch, 0);
	if (!s->cq) {
		int e = errno;
		ibv_destroy_comp_channel(s->cch);
		s->cch = NULL;
		return ERR(e);
	}
	id->recv_cq_channel = id->send_cq_channel = s->cch;
	id->recv_cq = id->send_cq = s->cq;
	ibv_req_notify_cq(s->cq, 0);
	s->armed = 1;

	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof(qa));
	qa.qp_context = s;
	qa.send_cq = qa.recv_cq = s->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = s->sq_size;
	qa.cap.max_recv_wr = s->rq_size;
	qa.cap.max_send_sge = 2;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = s->sq_inline;
	if (rdma_create_qp(id, NULL, &qa))
		return -1;
	s->sq_inline = qa.cap.max_inline_data;
	if (s->msgsend && s->sq_inline < 4) {
		sr_debug("rsocket connection: the iWARP QP takes %u inline bytes, the messages need 4", s->sq_inline);
		return ERR(EOPNOTSUPP);
	}

	s->rmsg = calloc(s->rq_size + 1, sizeof(*s->rmsg));
	size_t slen = s->sbuf_size + sizeof(struct rs_wsge) * RS_CTRL_SLOTS;
	size_t rlen = s->rbuf_size + (s->msgsend ? 4 * s->rq_size : 0);
	s->sbuf = calloc(1, slen);
	s->rbuf = calloc(1, rlen);
	s->tbuf = calloc(RS_SGL_SIZE, sizeof(struct rs_wsge));
	if (!s->rmsg || !s->sbuf || !s->rbuf || !s->tbuf)
		return ERR(ENOMEM);
	s->smr = ibv_reg_mr(id->pd, s->sbuf, slen, IBV_ACCESS_LOCAL_WRITE);
	s->rmr = ibv_reg_mr(id->pd, s->rbuf, rlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	s->tmr = ibv_reg_mr(id->pd, s->tbuf, RS_SGL_SIZE * sizeof(struct rs_wsge),
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->smr || !s->rmr || !s->tmr)
		return -1;

	s->savail = s->sbuf_size;
	s->soff = 0;
	s->rfree = s->rbuf_size / 2;
	s->ravail = s->rbuf_size / 2;
	s->sqe_avail = s->sq_size - s->ctrl_max;
	s->rseq_comp = s->rq_size / 2;
	for (int i = 0; i < s->rq_size; i++)
		if (rs_post_recv(s))
			return -1;
	return 0;
}

static void rs_format_conn(struct rsk *s, struct rs_conn *c)
{
	memset(c, 0, sizeof(*c));
	c->version = 1;
	c->flags = RS_CONN_IOMAP | (__BYTE_ORDER == __BIG_ENDIAN ? RS_CONN_NET : 0);
	c->credits = htobe16(s->rq_size);
	c->iomap_size = 0; /* no iomap targets: riomap is not implemented */
	c->target_sgl.addr = htobe64((uintptr_t)s->tbuf);
	c->target_sgl.key = htobe32(s->tmr->rkey);
	c->target_sgl.length = htobe32(RS_SGL_SIZE);
	c->data_buf.addr = htobe64((uintptr_t)s->rbuf);
	c->data_buf.key = htobe32(s->rmr->rkey);
	c->data_buf.length = htobe32(s->rbuf_size / 2);
}

/* rs_save_conn takes the peer's private data; 0, or -1 with EPROTO. */
static int rs_save_conn(struct rsk *s, const void *pd, int len)
{
	struct rs_conn c;
	if (!pd || len < (int)sizeof(c)) {
		sr_debug("rsocket connection: the peer's private data is %d bytes, not an rsocket's %zu", len, sizeof(c));
		return ERR(EPROTO);
	}
	memcpy(&c, pd, sizeof(c));
	if (c.version != 1) {
		sr_debug("rsocket connection: the peer's rsocket protocol version is %u, not 1", c.version);
		return ERR(EPROTO);
	}
	s->rsgl.addr = be64toh(c.target_sgl.addr);
	s->rsgl.key = be32toh(c.target_sgl.key);
	s->rsgl.length = be32toh(c.target_sgl.length);
	if (!s->rsgl.length)
		s->rsgl.length = 1;
	s->ridx = 1 % s->rsgl.length;
	s->swap = !!(c.flags & RS_CONN_NET) != (__BYTE_ORDER == __BIG_ENDIAN);
	s->tbuf[0].addr = be64toh(c.data_buf.addr);
	s->tbuf[0].key = be32toh(c.data_buf.key);
	s->tbuf[0].length = be32toh(c.data_buf.length);
	s->tidx = 0;
	s->sseq_comp = be16toh(c.credits);
	return 0;
}

/* ---- Sending ---- */

static int rs_post(struct rsk *s, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int rc = ibv_post_send(s->id->qp, wr, &bad);
	return rc ? ERR(rc < 0 ? -rc : rc) : 0;
}

/* rs_post_msg sends a message with no data. */
static int rs_post_msg(struct rsk *s, uint32_t msg)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = msg;
	if (!s->msgsend) {
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htobe32(msg);
	} else {
		sge.addr = (uintptr_t)&msg;
		sge.length = sizeof(msg);
		sge.lkey = 0;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_INLINE;
	}
	return rs_post(s, &wr);
}

/* rs_post_write_msg writes sgl to addr/rkey and delivers msg with it. */
static int rs_post_write_msg(struct rsk *s, struct ibv_sge *sgl, int nsge, uint32_t msg, int flags,
			     uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = msg;
	wr.sg_list = sgl;
	wr.num_sge = nsge;
	wr.send_flags = flags;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (!s->msgsend) {
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htobe32(msg);
		return rs_post(s, &wr);
	}
	wr.opcode = IBV_WR_RDMA_WRITE;
	if (rs_post(s, &wr))
		return -1;
	struct ibv_sge sge = {.addr = (uintptr_t)&msg, .length = sizeof(msg), .lkey = 0};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = RS_MSG(RS_MSG_OP(msg), 0) | RS_WR_MSGSEND;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_INLINE;
	return rs_post(s, &wr);
}

static int rs_ctrl_avail(struct rsk *s)
{
	if (s->msgsend)
		return (int)(s->ctrl_seq + 1 - s->ctrl_max) < 0;
	return s->ctrl_seq != s->ctrl_max;
}

/* rs_send_credits tells the peer how far it may send, with a free half of the
 * receive buffer if there is one. */
static void rs_send_credits(struct rsk *s)
{
	uint32_t half = s->rbuf_size / 2;
	uint32_t msg = RS_MSG(RS_OP_SGL, (uint32_t)s->rseq_no + s->rq_size);
	s->ctrl_seq++;
	s->rseq_comp = s->rseq_no + s->rq_size / 2;
	if (s->ravail < (int)half) {
		rs_post_msg(s, msg);
		return;
	}
	if (s->msgsend)
		s->ctrl_seq++;
	struct rs_wsge g;
	g.addr = (uintptr_t)(s->rbuf + s->rfree);
	g.key = s->rmr->rkey;
	g.length = half;
	if (s->swap) {
		g.addr = bswap_64(g.addr);
		g.key = bswap_32(g.key);
		g.length = bswap_32(g.length);
	}
	struct ibv_sge sge;
	int flags;
	if (s->sq_inline >= sizeof(g)) {
		sge.addr = (uintptr_t)&g;
		sge.lkey = 0;
		flags = IBV_SEND_INLINE;
	} else {
		/* A slot of the control area after the send buffer, not reused
		 * before this message completes (RS_CTRL_SLOTS in flight). */
		uint8_t *slot = s->sbuf + s->sbuf_size + sizeof(g) * (s->ctrl_seq % RS_CTRL_SLOTS);
		memcpy(slot, &g, sizeof(g));
		sge.addr = (uintptr_t)slot;
		sge.lkey = s->smr->lkey;
		flags = 0;
	}
	sge.length = sizeof(g);
	rs_post_write_msg(s, &sge, 1, msg, flags, s->rsgl.addr + (uint64_t)s->ridx * sizeof(struct rs_wsge),
			  s->rsgl.key);
	s->ravail -= half;
	s->rfree += half;
	if (s->rfree >= s->rbuf_size)
		s->rfree = 0;
	if (++s->ridx == (int)s->rsgl.length)
		s->ridx = 0;
}

static void rs_update_credits(struct rsk *s)
{
	if (s->state != RS_CONNECTED || s->hold || !rs_ctrl_avail(s))
		return;
	if (s->ravail >= (int)(s->rbuf_size / 2) || (int16_t)(s->rseq_no - s->rseq_comp) >= 0)
		rs_send_credits(s);
}

/* ---- Completions ---- */

static void rs_fail(struct rsk *s, int err)
{
	if (s->state == RS_CONNECTED) {
		s->state = RS_ERROR;
		s->err = err;
	}
}

/* rs_poll_cq takes the completions there are and reposts the receives. */
static int rs_poll_cq(struct rsk *s)
{
	struct ibv_wc wc;
	int n, rcnt = 0;
	if (!s->cq)
		return 0;
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) > 0) {
		if (wc.wr_id & RS_WR_RECV) {
			if (wc.status != IBV_WC_SUCCESS)
				continue;
			rcnt++;
			s->hold = 0;
			uint32_t msg;
			if (wc.wc_flags & IBV_WC_WITH_IMM)
				msg = be32toh(wc.imm_data);
			else
				memcpy(&msg, s->rbuf + s->rbuf_size + 4 * (uint32_t)wc.wr_id, 4);
			uint32_t v = RS_MSG_VAL(msg);
			switch (RS_MSG_OP(msg)) {
			case RS_OP_SGL:
				s->sseq_comp = (uint16_t)v;
				break;
			case RS_OP_CTRL:
				if (v == RS_CTRL_DISCONNECT) {
					if (s->state == RS_CONNECTED)
						s->state = RS_DISCONNECTED;
				} else if (v == RS_CTRL_SHUTDOWN) {
					if (s->wr)
						s->rd = 0;
					else if (s->state == RS_CONNECTED)
						s->state = RS_DISCONNECTED;
				}
				break;
			case RS_OP_DATA:
				s->rmsg[s->rtail].op = RS_OP_DATA;
				s->rmsg[s->rtail].len = v;
				if (++s->rtail == s->rq_size + 1)
					s->rtail = 0;
				break;
			default: /* iomap SGLs (no iomap here), reserved ops */
				break;
			}
		} else {
			uint32_t msg = (uint32_t)wc.wr_id;
			switch (RS_MSG_OP(msg)) {
			case RS_OP_SGL:
				s->ctrl_max++;
				break;
			case RS_OP_CTRL:
				s->ctrl_max++;
				if (RS_MSG_VAL(msg) == RS_CTRL_DISCONNECT && s->state == RS_CONNECTED)
					s->state = RS_DISCONNECTED;
				break;
			case RS_OP_IOMAP_SGL:
				s->sqe_avail++;
				break;
			default:
				s->sqe_avail++;
				s->savail += RS_MSG_VAL(msg);
				break;
			}
			if (wc.status != IBV_WC_SUCCESS) {
				sr_debug("rsocket connection: send completion status %d (%s): the connection fails", wc.status,
					 ibv_wc_status_str(wc.status));
				rs_fail(s, EIO);
			}
		}
	}
	if (s->state == RS_CONNECTED) {
		while (rcnt--) {
			if (rs_post_recv(s)) {
				rs_fail(s, errno);
				return -1;
			}
		}
	}
	return n < 0 ? ERR(EIO) : 0;
}

/* rs_drain_cq_events reads the completion events the channel has. */
static void rs_drain_cq_events(struct rsk *s)
{
	struct ibv_cq *cq;
	void *ctx;
	if (!s->cch)
		return;
	while (!ibv_get_cq_event(s->cch, &cq, &ctx)) {
		s->armed = 0;
		if (++s->unacked >= 256) {
			ibv_ack_cq_events(s->cq, s->unacked);
			s->unacked = 0;
		}
	}
}

/* ---- Connection management ---- */

static int rs_event_err(struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return ECONNREFUSED;
	if (ev->status)
		return ev->status < 0 ? -ev->status : ev->status;
	if (ev->event == RDMA_CM_EVENT_UNREACHABLE)
		return EHOSTUNREACH;
	return ECONNREFUSED;
}

static void rs_connect_failed(struct rsk *s, int err)
{
	s->state = RS_CONNECT_ERROR;
	s->err = err;
}

/* rs_start_connect makes the QP and sends the connect request. */
static void rs_start_connect(struct rsk *s)
{
	if (rs_create_ep(s)) {
		rs_connect_failed(s, errno);
		return;
	}
	struct rs_conn c;
	rs_format_conn(s, &c);
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = &c;
	p.private_data_len = sizeof(c);
	p.flow_control = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	if (s->msgsend)
		p.initiator_depth = 1; /* as rdma-core's rsockets over iWARP */
	if (rdma_connect(s->id, &p)) {
		rs_connect_failed(s, errno);
		return;
	}
	s->state = RS_CONNECTING;
}

/* rs_cm_events takes the socket's CM events there are (its channel is
 * non-blocking) and moves its state. */
static void rs_cm_events(struct rsk *s)
{
	struct rdma_cm_event *ev;
	while (s->ch && !rdma_get_cm_event(s->ch, &ev)) {
		int type = ev->event;
		switch (type) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (s->state == RS_RESOLVING_ADDR) {
				if (rdma_resolve_route(s->id, 2000))
					rs_connect_failed(s, errno);
				else
					s->state = RS_RESOLVING_ROUTE;
			}
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			if (s->state == RS_RESOLVING_ROUTE)
				rs_start_connect(s);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (s->state == RS_CONNECTING) {
				if (rs_save_conn(s, ev->param.conn.private_data, ev->param.conn.private_data_len)) {
					rs_connect_failed(s, errno);
					rdma_disconnect(s->id);
				} else {
					s->state = RS_CONNECTED;
					s->rd = s->wr = 1;
				}
			} else if (s->state == RS_ACCEPTING) {
				s->state = RS_CONNECTED;
				s->rd = s->wr = 1;
			}
			break;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			if (rs_opening(s->state))
				rs_connect_failed(s, rs_event_err(ev));
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			/* The peer went without a disconnect message (or after
			 * one): what the CQ holds is still read. */
			rs_poll_cq(s);
			if (s->state == RS_CONNECTED)
				s->state = RS_DISCONNECTED;
			else if (rs_opening(s->state))
				rs_connect_failed(s, ECONNRESET);
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
}

/* rs_accept_conn answers a connection request on listener l. */
static void rs_accept_conn(struct rsk *l, struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = ev->id;
	uint8_t pdata[256];
	int plen = ev->param.conn.private_data_len;
	if (plen > (int)sizeof(pdata))
		plen = sizeof(pdata);
	if (ev->param.conn.private_data)
		memcpy(pdata, ev->param.conn.private_data, plen);
	else
		plen = 0;
	struct rdma_conn_param req = ev->param.conn;
	rdma_ack_cm_event(ev);

	struct rsk *s = rs_new(l);
	if (!s) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	if (rdma_migrate_id(id, s->ch)) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		rs_free(s);
		return;
	}
	s->id = id;
	id->context = s;
	if (l->npend == l->cappend) {
		int n = l->cappend ? 2 * l->cappend : 8;
		struct rsk **p = realloc(l->pend, n * sizeof(*p));
		if (!p)
			goto reject;
		l->pend = p;
		l->cappend = n;
	}
	if (rs_create_ep(s))
		goto reject;
	s->hold = s->msgsend;
	if (rs_save_conn(s, plen ? pdata : NULL, plen))
		goto reject;
	struct rs_conn c;
	rs_format_conn(s, &c);
	struct rdma_conn_param p = req;
	p.private_data = &c;
	p.private_data_len = sizeof(c);
	if (rdma_accept(id, &p))
		goto reject;
	s->state = RS_ACCEPTING;
	l->pend[l->npend++] = s;
	return;
reject:
	sr_debug("rsocket accept: %s: the request is rejected", strerror(errno));
	rdma_reject(id, NULL, 0);
	rs_free(s);
}

/* rs_listen_events takes the listener's requests and moves its accepted
 * connections on; it returns the index of an established one, or -1. */
static int rs_listen_events(struct rsk *l)
{
	struct rdma_cm_event *ev;
	while (!rdma_get_cm_event(l->ch, &ev)) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			rs_accept_conn(l, ev);
		else
			rdma_ack_cm_event(ev);
	}
	for (int i = 0; i < l->npend; i++) {
		struct rsk *s = l->pend[i];
		if (s->state == RS_ACCEPTING)
			rs_cm_events(s);
		if (s->state == RS_ACCEPTING)
			continue;
		if (s->state == RS_CONNECT_ERROR) {
			rs_free(s);
			l->pend[i--] = l->pend[--l->npend];
			continue;
		}
		return i;
	}
	return -1;
}

/* rs_wait_fds waits (without s's lock) for one of fds to be readable, for at
 * most ms (capped: a missed wakeup costs no more than that). */
static void rs_wait_fds(struct rsk *s, struct pollfd *p, int n, int ms)
{
	if (ms < 0 || ms > 100)
		ms = 100;
	pthread_mutex_unlock(&s->mu);
	poll(p, n, ms);
	pthread_mutex_lock(&s->mu);
}

/* rs_progress, with s->mu held: moves the connection on (completions, CM
 * events, credits) until test(s) holds. nonblock: EWOULDBLOCK at once. */
static int rs_progress(struct rsk *s, int nonblock, int (*test)(struct rsk *))
{
	for (;;) {
		rs_drain_cq_events(s);
		rs_update_credits(s);
		int ret = rs_poll_cq(s);
		rs_cm_events(s);
		rs_update_credits(s);
		if (test(s))
			return 0;
		if (ret)
			return ret;
		if (nonblock)
			return ERR(EWOULDBLOCK);
		if (!s->armed && s->cq) {
			ibv_req_notify_cq(s->cq, 0);
			s->armed = 1;
			continue; /* what came before the arming */
		}
		struct pollfd p[2] = {{.fd = s->ch->fd, .events = POLLIN}, {.fd = s->cch ? s->cch->fd : -1, .events = POLLIN}};
		rs_wait_fds(s, p, 2, -1);
	}
}

static int rs_is_connected(struct rsk *s)
{
	return !rs_opening(s->state);
}

/* rs_finish_connect moves a connecting socket on: 0 once connected, -1 with
 * EINPROGRESS while non-blocking and not yet, or the connection's error. */
static int rs_finish_connect(struct rsk *s, int nonblock)
{
	if (rs_opening(s->state)) {
		int rc = rs_progress(s, nonblock, rs_is_connected);
		if (rc && errno == EWOULDBLOCK)
			return ERR(EINPROGRESS);
	}
	if (s->state == RS_CONNECT_ERROR)
		return ERR(s->err ? s->err : ECONNREFUSED);
	if (s->state == RS_INIT || s->state == RS_BOUND || s->state == RS_LISTENING)
		return ERR(ENOTCONN);
	return 0;
}

/* ---- The socket calls ---- */

int rsocket(int domain, int type, int protocol)
{
	int st = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (domain != AF_INET && domain != AF_INET6) {
		sr_debug("rsocket: domain %d not supported (EOPNOTSUPP): softrdma's rsockets take AF_INET and AF_INET6", domain);
		return ERR(EOPNOTSUPP);
	}
	if (st == SOCK_DGRAM) {
		sr_debug("rsocket: SOCK_DGRAM is not implemented (EOPNOTSUPP): softrdma's rsockets are SOCK_STREAM");
		return ERR(EOPNOTSUPP);
	}
	if (st != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP))
		return ERR(EOPNOTSUPP);
	struct rsk *s = rs_new(NULL);
	if (!s)
		return -1;
	s->nonblock = !!(type & SOCK_NONBLOCK);
	s->fdflags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
	if (rdma_create_id(s->ch, &s->id, s, RDMA_PS_TCP) || rs_insert(s)) {
		int e = errno;
		rs_free(s);
		return ERR(e);
	}
	s->id->route.addr.src_addr.sa_family = domain;
	return s->fd;
}

#define RS_GET(fd)                          \
	struct rsk *s = rs_lookup(fd);      \
	if (!s)                             \
		return ERR(EBADF);

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	RS_GET(socket);
	pthread_mutex_lock(&s->mu);
	int rc = ERR(EINVAL);
	if (s->state == RS_INIT) {
		rc = rdma_bind_addr(s->id, (struct sockaddr *)addr);
		if (!rc)
			s->state = RS_BOUND;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int rlisten(int socket, int backlog)
{
	RS_GET(socket);
	pthread_mutex_lock(&s->mu);
	int rc = 0;
	if (s->state != RS_LISTENING) {
		rc = rdma_listen(s->id, backlog);
		if (!rc)
			s->state = RS_LISTENING;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static void rs_copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
	socklen_t n = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	if (dst && len) {
		memcpy(dst, src, *len < n ? *len : n);
		*len = n;
	}
}

int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	RS_GET(socket);
	pthread_mutex_lock(&s->mu);
	if (s->state != RS_LISTENING) {
		pthread_mutex_unlock(&s->mu);
		return ERR(EINVAL);
	}
	struct rsk *n = NULL;
	for (;;) {
		int i = rs_listen_events(s);
		if (i >= 0) {
			n = s->pend[i];
			s->pend[i] = s->pend[--s->npend];
			break;
		}
		if (s->nonblock) {
			pthread_mutex_unlock(&s->mu);
			return ERR(EAGAIN);
		}
		int np = 1 + s->npend;
		struct pollfd p[np];
		p[0] = (struct pollfd){.fd = s->ch->fd, .events = POLLIN};
		for (int j = 0; j < s->npend; j++)
			p[1 + j] = (struct pollfd){.fd = s->pend[j]->ch->fd, .events = POLLIN};
		rs_wait_fds(s, p, np, -1);
	}
	pthread_mutex_unlock(&s->mu);
	if (rs_insert(n)) {
		rs_free(n);
		return -1;
	}
	if (addr && addrlen)
		rs_copy_addr(addr, addrlen, rdma_get_peer_addr(n->id));
	return n->fd;
}

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	RS_GET(socket);
	pthread_mutex_lock(&s->mu);
	int rc;
	if (s->state == RS_INIT || s->state == RS_BOUND) {
		if (!addr || addrlen < sizeof(struct sockaddr_in)) {
			pthread_mutex_unlock(&s->mu);
			return ERR(EINVAL);
		}
		struct sockaddr_storage dst;
		memset(&dst, 0, sizeof(dst));
		memcpy(&dst, addr, addrlen < sizeof(dst) ? addrlen : sizeof(dst));
		if (rdma_resolve_addr(s->id, NULL, (struct sockaddr *)&dst, 2000))
			rs_connect_failed(s, errno);
		else
			s->state = RS_RESOLVING_ADDR;
	}
	rc = rs_finish_connect(s, s->nonblock);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* rs_wait_connected finishes a connection an rsend or rrecv meets opening. */
static int rs_wait_connected(struct rsk *s, int nonblock)
{
	if (!rs_opening(s->state))
		return 0;
	int rc = rs_finish_connect(s, nonblock);
	if (rc && errno == EINPROGRESS)
		errno = EAGAIN;
	return rc;
}

static int rs_have_data(struct rsk *s)
{
	return s->rhead != s->rtail;
}

static int rs_readable(struct rsk *s)
{
	return s->state == RS_CONNECTED && s->rd;
}

static int rs_writable(struct rsk *s)
{
	return s->state == RS_CONNECTED && s->wr;
}

static int rs_recv_ready(struct rsk *s)
{
	return rs_have_data(s) || !rs_readable(s);
}

static int rs_can_send(struct rsk *s)
{
	return !s->hold && s->sqe_avail >= (s->msgsend ? 2 : 1) && s->savail >= RS_SNDLOWAT && s->sseq_no != s->sseq_comp &&
	       ((volatile struct rs_wsge *)s->tbuf)[s->tidx].length != 0;
}

static int rs_send_ready(struct rsk *s)
{
	return rs_can_send(s) || !rs_writable(s);
}

static int rs_nb(struct rsk *s, int flags)
{
	return s->nonblock || (flags & MSG_DONTWAIT);
}

/* rs_lock_connected takes s->mu for an rrecv (recv) or an rsend: it finishes
 * a connection still opening and checks that the connection has the
 * transfer's buffers. On failure the lock is released and it returns -1 with
 * errno set. */
static int rs_lock_connected(struct rsk *s, int flags, int recv)
{
	pthread_mutex_lock(&s->mu);
	if (rs_wait_connected(s, rs_nb(s, flags))) {
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	if (recv ? !s->rmsg : !s->sbuf) {
		pthread_mutex_unlock(&s->mu);
		return ERR(ENOTCONN);
	}
	return 0;
}

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	RS_GET(socket);
	if (rs_lock_connected(s, flags, 1))
		return -1;
	uint8_t *b = buf;
	size_t left = len;
	int ret = 0;
	do {
		if (!rs_have_data(s)) {
			ret = rs_progress(s, rs_nb(s, flags), rs_recv_ready);
			if (ret)
				break;
		}
		uint32_t head = s->rhead, off = s->roff;
		while (left && head != (uint32_t)s->rtail) {
			uint32_t n = s->rmsg[head].len;
			if (left < n)
				n = left;
			uint32_t done = 0;
			while (done < n) {
				uint32_t chunk = n - done, end = s->rbuf_size - off;
				if (chunk > end)
					chunk = end;
				memcpy(b, s->rbuf + off, chunk);
				b += chunk;
				done += chunk;
				off += chunk;
				if (off == s->rbuf_size)
					off = 0;
			}
			left -= n;
			if (flags & MSG_PEEK) {
				if (n < s->rmsg[head].len)
					break;
				if (++head == (uint32_t)s->rq_size + 1)
					head = 0;
				continue;
			}
			s->ravail += n;
			if (n < s->rmsg[head].len) {
				s->rmsg[head].len -= n;
			} else {
				s->rseq_no++;
				if (++head == (uint32_t)s->rq_size + 1)
					head = 0;
			}
			s->rhead = head;
			s->roff = off;
		}
		if (flags & MSG_PEEK)
			break;
	} while (left && (flags & MSG_WAITALL) && rs_readable(s));
	rs_update_credits(s);
	pthread_mutex_unlock(&s->mu);
	if (ret && left == len)
		return ret;
	return len - left;
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	RS_GET(socket);
	if (rs_lock_connected(s, flags, 0))
		return -1;
	const uint8_t *b = buf;
	size_t left = len;
	uint32_t olen = RS_FIRST_XFER;
	int ret = 0;
	while (left) {
		if (rs_can_send(s) && rs_writable(s)) {
			/* go */
		} else if (!rs_writable(s)) {
			/* Shut down for writing here (EPIPE, as a TCP socket), or
			 * the connection has gone (rdma-core's ECONNRESET). */
			ret = ERR(s->state == RS_CONNECTED ? EPIPE : s->state == RS_ERROR && s->err ? s->err : ECONNRESET);
			break;
		} else {
			ret = rs_progress(s, rs_nb(s, flags), rs_send_ready);
			if (ret)
				break;
			continue;
		}
		uint32_t x;
		if (olen < left) {
			x = olen;
			if (olen < RS_MAX_XFER)
				olen <<= 1;
		} else {
			x = left;
		}
		volatile struct rs_wsge *t = &((volatile struct rs_wsge *)s->tbuf)[s->tidx];
		if (x > (uint32_t)s->savail)
			x = s->savail;
		if (x > t->length)
			x = t->length;

		struct ibv_sge sg[2];
		int nsge = 1, fl = 0;
		if (x <= s->sq_inline) {
			sg[0].addr = (uintptr_t)b;
			sg[0].length = x;
			sg[0].lkey = 0;
			fl = IBV_SEND_INLINE;
		} else {
			uint32_t room = s->sbuf_size - s->soff;
			uint32_t a = x < room ? x : room;
			memcpy(s->sbuf + s->soff, b, a);
			sg[0].addr = (uintptr_t)(s->sbuf + s->soff);
			sg[0].length = a;
			sg[0].lkey = s->smr->lkey;
			if (a < x) {
				memcpy(s->sbuf, b + a, x - a);
				sg[1].addr = (uintptr_t)s->sbuf;
				sg[1].length = x - a;
				sg[1].lkey = s->smr->lkey;
				nsge = 2;
				s->soff = x - a;
			} else {
				s->soff += a;
				if (s->soff == s->sbuf_size)
					s->soff = 0;
			}
		}
		uint64_t raddr = t->addr;
		uint32_t rkey = t->key;
		t->addr += x;
		t->length -= x;
		if (!t->length && ++s->tidx == RS_SGL_SIZE)
			s->tidx = 0;
		s->sseq_no++;
		s->sqe_avail -= s->msgsend ? 2 : 1;
		s->savail -= x;
		ret = rs_post_write_msg(s, sg, nsge, RS_MSG(RS_OP_DATA, x), fl, raddr, rkey);
		if (ret)
			break;
		left -= x;
		b += x;
	}
	pthread_mutex_unlock(&s->mu);
	if (ret && left == len)
		return ret;
	return len - left;
}

ssize_t rread(int socket, void *buf, size_t count)
{
	return rrecv(socket, buf, count, 0);
}

ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return rsend(socket, buf, count, 0);
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen)
{
	ssize_t n = rrecv(socket, buf, len, flags);
	if (n > 0 && src_addr)
		rgetpeername(socket, src_addr, addrlen);
	return n;
}

ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
		socklen_t addrlen)
{
	if (dest_addr)
		return ERR(EISCONN);
	return rsend(socket, buf, len, flags);
}

/* The vector calls go vector by vector, each a call of its own. */
static ssize_t rs_recvv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		ssize_t n = rrecv(socket, iov[i].iov_base, iov[i].iov_len, total ? flags | MSG_DONTWAIT : flags);
		if (n < 0)
			return total ? total : n;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

static ssize_t rs_sendv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		ssize_t n = rsend(socket, iov[i].iov_base, iov[i].iov_len, flags);
		if (n < 0)
			return total ? total : n;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return ERR(EOPNOTSUPP);
	return rs_recvv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return ERR(EOPNOTSUPP);
	return rs_sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_recvv(socket, iov, iovcnt, 0);
}

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_sendv(socket, iov, iovcnt, 0);
}

static int rs_sends_done(struct rsk *s)
{
	return s->state != RS_CONNECTED ||
	       (int)(s->ctrl_max - s->ctrl_seq) + s->sqe_avail == s->sq_size;
}

static int rs_ctrl_ready(struct rsk *s)
{
	return rs_ctrl_avail(s) || s->state != RS_CONNECTED;
}

/* rs_shutdown, with s->mu held. */
static int rs_shutdown(struct rsk *s, int how)
{
	int ret = 0;
	if (s->state == RS_CONNECTED) {
		int ctrl;
		if (how == SHUT_RDWR) {
			ctrl = RS_CTRL_DISCONNECT;
			s->rd = s->wr = 0;
		} else if (how == SHUT_WR) {
			s->wr = 0;
			ctrl = s->rd ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
		} else {
			s->rd = 0;
			if (s->wr)
				return 0;
			ctrl = RS_CTRL_DISCONNECT;
		}
		if (s->hold) {
			/* Nothing may go out yet: the CM's disconnect says it. */
			if (!s->rd && !s->wr)
				s->state = RS_DISCONNECTED;
			goto out;
		}
		if (!rs_ctrl_avail(s))
			ret = rs_progress(s, 0, rs_ctrl_ready);
		if (!ret && s->state == RS_CONNECTED && rs_ctrl_avail(s)) {
			s->ctrl_seq++;
			ret = rs_post_msg(s, RS_MSG(RS_OP_CTRL, ctrl));
		}
		if (s->state == RS_CONNECTED)
			rs_progress(s, 0, rs_sends_done);
	}
out:
	if (s->state == RS_DISCONNECTED && s->id)
		rdma_disconnect(s->id);
	return ret;
}

int rshutdown(int socket, int how)
{
	RS_GET(socket);
	pthread_mutex_lock(&s->mu);
	int rc = rs_shutdown(s, how);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int rclose(int socket)
{
	RS_GET(socket);
	rs_remove(s);
	pthread_mutex_lock(&s->mu);
	if (s->state == RS_CONNECTED)
		rs_shutdown(s, SHUT_RDWR);
	pthread_mutex_unlock(&s->mu);
	rs_free(s);
	return 0;
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	RS_GET(socket);
	if (!addr || !addrlen)
		return ERR(EFAULT);
	pthread_mutex_lock(&s->mu);
	int ok = s->state == RS_CONNECTED || s->state == RS_DISCONNECTED || rs_opening(s->state);
	if (ok)
		rs_copy_addr(addr, addrlen, rdma_get_peer_addr(s->id));
	pthread_mutex_unlock(&s->mu);
	return ok ? 0 : ERR(ENOTCONN);
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	RS_GET(socket);
	if (!addr || !addrlen)
		return ERR(EFAULT);
	pthread_mutex_lock(&s->mu);
	rs_copy_addr(addr, addrlen, rdma_get_local_addr(s->id));
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static void rs_opt_bit(uint64_t *opts, int name, int on)
{
	if (name < 0 || name >= 64)
		return;
	if (on)
		*opts |= 1ULL << name;
	else
		*opts &= ~(1ULL << name);
}

int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	RS_GET(socket);
	if (!optval || optlen < sizeof(int))
		return ERR(EINVAL);
	int v = *(const int *)optval;
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
			rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, (void *)optval, optlen);
			rs_opt_bit(&s->so_opts, optname, v);
			break;
		case SO_RCVBUF:
			if (!s->rbuf)
				s->rbuf_size = (uint32_t)v << 1;
			break;
		case SO_SNDBUF:
			if (!s->sbuf)
				s->sbuf_size = (uint32_t)v << 1;
			if (s->sbuf_size < RS_SNDLOWAT)
				s->sbuf_size = RS_SNDLOWAT << 1;
			break;
		case SO_KEEPALIVE:
			/* Kept; no keepalive messages are sent (the RC
			 * connection's own retries find a dead peer). */
		case SO_OOBINLINE:
			rs_opt_bit(&s->so_opts, optname, v);
			break;
		case SO_LINGER:
			rs_opt_bit(&s->so_opts, optname, !((const struct linger *)optval)->l_onoff);
			break;
		default:
			rc = ERR(ENOTSUP);
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_NODELAY:
			rs_opt_bit(&s->tcp_opts, optname, v);
			break;
		case TCP_KEEPIDLE:
			if (v <= 0)
				rc = ERR(EINVAL);
			else
				s->keepalive_time = v;
			break;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
		case TCP_CONGESTION:
			break;
		default:
			rc = ERR(ENOTSUP);
		}
		break;
	case IPPROTO_IP:
		if (optname == IP_TOS) {
			uint8_t tos = v;
			s->tos = v;
			rc = rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos));
		} else {
			rc = ERR(ENOTSUP);
		}
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY) {
			rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, (void *)optval, optlen);
			rs_opt_bit(&s->ipv6_opts, optname, v);
		} else {
			rc = ERR(ENOTSUP);
		}
		break;
	case SOL_RDMA:
		if (s->state >= RS_RESOLVING_ADDR) {
			rc = ERR(EINVAL);
			break;
		}
		switch (optname) {
		case RDMA_SQSIZE:
			s->sq_size = (uint32_t)v < RS_QP_MAX ? (uint32_t)v : RS_QP_MAX;
			break;
		case RDMA_RQSIZE:
			s->rq_size = (uint32_t)v < RS_QP_MAX ? (uint32_t)v : RS_QP_MAX;
			break;
		case RDMA_INLINE:
			s->sq_inline = (uint32_t)v < RS_QP_MAX ? (uint32_t)v : RS_QP_MAX;
			break;
		case RDMA_IOMAPSIZE:
			s->iomap_size = v; /* kept for rgetsockopt; no iomap is offered */
			break;
		case RDMA_ROUTE:
			/* The route of rdma_getaddrinfo: the CM resolves its own. */
			break;
		default:
			rc = ERR(ENOTSUP);
		}
		break;
	default:
		rc = ERR(ENOTSUP);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	RS_GET(socket);
	if (!optval || !optlen)
		return ERR(EFAULT);
	int v = 0, rc = 0;
	pthread_mutex_lock(&s->mu);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			v = !!(s->so_opts & (1ULL << optname));
			break;
		case SO_RCVBUF:
			v = s->rbuf_size;
			break;
		case SO_SNDBUF:
			v = s->sbuf_size;
			break;
		case SO_LINGER:
			if (*optlen < sizeof(struct linger)) {
				rc = ERR(EINVAL);
			} else {
				struct linger lg = {.l_onoff = !(s->so_opts & (1ULL << SO_LINGER)), .l_linger = 0};
				memcpy(optval, &lg, sizeof(lg));
				*optlen = sizeof(lg);
			}
			pthread_mutex_unlock(&s->mu);
			return rc;
		case SO_ERROR:
			if (rs_opening(s->state))
				rs_finish_connect(s, 1);
			v = s->err;
			s->err = 0;
			break;
		default:
			rc = ERR(ENOTSUP);
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_NODELAY:
			v = !!(s->tcp_opts & (1ULL << TCP_NODELAY));
			break;
		case TCP_KEEPIDLE:
			v = s->keepalive_time;
			break;
		case TCP_MAXSEG:
			v = s->id && s->id->route.num_paths ? 1024 : 2048;
			break;
		default:
			rc = ERR(ENOTSUP);
		}
		break;
	case IPPROTO_IP:
		if (optname == IP_TOS)
			v = s->tos;
		else
			rc = ERR(ENOTSUP);
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY)
			v = !!(s->ipv6_opts & (1ULL << IPV6_V6ONLY));
		else
			rc = ERR(ENOTSUP);
		break;
	case SOL_RDMA:
		switch (optname) {
		case RDMA_SQSIZE:
			v = s->sq_size;
			break;
		case RDMA_RQSIZE:
			v = s->rq_size;
			break;
		case RDMA_INLINE:
			v = s->sq_inline;
			break;
		case RDMA_IOMAPSIZE:
			v = s->iomap_size;
			break;
		default:
			rc = ERR(ENOTSUP);
		}
		break;
	default:
		rc = ERR(ENOTSUP);
	}
	if (!rc) {
		if (*optlen < sizeof(int)) {
			rc = ERR(EINVAL);
		} else {
			memcpy(optval, &v, sizeof(v));
			*optlen = sizeof(int);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int rfcntl(int socket, int cmd, ... /* arg */)
{
	RS_GET(socket);
	va_list ap;
	va_start(ap, cmd);
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	switch (cmd) {
	case F_GETFL:
		rc = s->nonblock ? O_NONBLOCK : 0;
		break;
	case F_SETFL:
		s->nonblock = !!(va_arg(ap, int) & O_NONBLOCK);
		break;
	case F_GETFD:
		rc = s->fdflags;
		break;
	case F_SETFD:
		s->fdflags = va_arg(ap, int);
		break;
	default:
		rc = ERR(ENOTSUP);
	}
	pthread_mutex_unlock(&s->mu);
	va_end(ap);
	return rc;
}

/* ---- rpoll, rselect ---- */

static int rs_poll_all(struct rsk *s)
{
	(void)s;
	return 1;
}

/* rs_revents, with s->mu held: what s has for events, moving it on without
 * waiting. */
static short rs_revents(struct rsk *s, short events)
{
	short rev = 0;
	if (s->state == RS_LISTENING) {
		if (rs_listen_events(s) >= 0)
			rev |= events & POLLIN;
		return rev;
	}
	if (rs_opening(s->state)) {
		rs_cm_events(s);
		if (rs_opening(s->state))
			return 0;
	}
	if (s->state == RS_CONNECT_ERROR)
		return (events & (POLLIN | POLLOUT)) | POLLERR;
	if (s->state == RS_CONNECTED || s->state == RS_DISCONNECTED || s->state == RS_ERROR) {
		rs_progress(s, 1, rs_poll_all);
		if ((events & POLLIN) && rs_recv_ready(s))
			rev |= POLLIN;
		if ((events & POLLOUT) && rs_can_send(s))
			rev |= POLLOUT;
		if (s->state == RS_DISCONNECTED)
			rev |= POLLHUP;
		else if (s->state == RS_ERROR)
			rev |= POLLERR;
	}
	return rev;
}

/* rs_wait_set adds to p the fds a wait on s watches (at most 2 + npend). */
static int rs_wait_set(struct rsk *s, struct pollfd *p)
{
	int n = 0;
	p[n++] = (struct pollfd){.fd = s->ch->fd, .events = POLLIN};
	if (s->cch) {
		if (!s->armed) {
			ibv_req_notify_cq(s->cq, 0);
			s->armed = 1;
		}
		p[n++] = (struct pollfd){.fd = s->cch->fd, .events = POLLIN};
	}
	for (int i = 0; i < s->npend; i++)
		p[n++] = (struct pollfd){.fd = s->pend[i]->ch->fd, .events = POLLIN};
	return n;
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	uint64_t start = rs_now_ms();
	for (;;) {
		int cnt = 0;
		size_t need = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsk *s = rs_lookup(fds[i].fd);
			fds[i].revents = 0;
			if (s) {
				pthread_mutex_lock(&s->mu);
				fds[i].revents = rs_revents(s, fds[i].events);
				need += 2 + s->npend;
				pthread_mutex_unlock(&s->mu);
			} else if (fds[i].fd >= 0) {
				struct pollfd p = fds[i];
				if (poll(&p, 1, 0) > 0)
					fds[i].revents = p.revents;
				need++;
			}
			if (fds[i].revents)
				cnt++;
		}
		if (cnt || !timeout)
			return cnt;
		int left = -1;
		if (timeout > 0) {
			uint64_t el = rs_now_ms() - start;
			if (el >= (uint64_t)timeout)
				return 0;
			left = timeout - (int)el;
		}
		/* Arm, then look once more: what came before the arming. */
		struct pollfd *p = calloc(need + 1, sizeof(*p));
		if (!p)
			return ERR(ENOMEM);
		size_t n = 0;
		cnt = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsk *s = rs_lookup(fds[i].fd);
			if (s) {
				pthread_mutex_lock(&s->mu);
				size_t room = 2 + s->npend;
				if (n + room <= need) {
					n += rs_wait_set(s, p + n);
					fds[i].revents = rs_revents(s, fds[i].events);
				}
				pthread_mutex_unlock(&s->mu);
			} else if (fds[i].fd >= 0 && n < need) {
				p[n++] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
			}
			if (fds[i].revents)
				cnt++;
		}
		if (cnt) {
			free(p);
			return cnt;
		}
		if (left < 0 || left > 100)
			left = 100; /* a missed wakeup costs no more */
		int rc = poll(p, n, left);
		int e = errno;
		free(p);
		if (rc < 0 && e != EINTR)
			return ERR(e);
	}
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *p = calloc(nfds > 0 ? nfds : 1, sizeof(*p));
	if (!p)
		return ERR(ENOMEM);
	int n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int ms = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
	int rc = rpoll(p, n, ms);
	if (rc < 0) {
		free(p);
		return rc;
	}
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	int cnt = 0;
	for (int i = 0; i < n; i++) {
		short r = p[i].revents;
		if (readfds && (r & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(p[i].fd, readfds);
			cnt++;
		}
		if (writefds && (r & (POLLOUT | POLLERR))) {
			FD_SET(p[i].fd, writefds);
			cnt++;
		}
		if (exceptfds && (r & POLLPRI)) {
			FD_SET(p[i].fd, exceptfds);
			cnt++;
		}
	}
	free(p);
	return cnt;
}
