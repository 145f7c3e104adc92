/* conform-ctl: the conformance control protocol (conform/CONTROL.md,
 * "softrdma-conform/1") served for any libibverbs device, so that
 * `softrdma conform --peer HOST` runs the cases that need a side channel to
 * the peer (memory read back, the peer as requester, RNR timing, UD) against a
 * hardware RNIC, the kernel's rxe, or softrdma's own libraries
 * (LD_LIBRARY_PATH=lib, or softrdma run -- conform-ctl).
 *
 *   conform-ctl [--listen ADDR:PORT] [--device NAME] [--addr IP] [--ib-port N]
 *               [--gid-index N] [--max-session-memory OCTETS] [--idle-timeout SECONDS]
 *
 * It listens on 127.0.0.1:7471 unless --listen says otherwise (the protocol has
 * no authentication: whoever reaches it registers memory the device's peers
 * may write), prints one line saying where once it listens, and serves one
 * session (one TCP connection) at a time, closing one that is silent for
 * --idle-timeout seconds (600); what a session creates is destroyed by reset
 * and when its connection closes. Requests come from the network:
 * every length, handle and value is checked, and a malformed line is answered
 * with an error, never a crash (capi/conformctl/json.c bounds the parser).
 *
 * On an iWARP device (siw) a QP is connected the iWARP way (CONTROL.md,
 * "iWARP"): create_qp leaves it in INIT and listens with rdma_cm on --addr (by
 * default the --listen host) for the tester's TCP connection and MPA Request;
 * the first connection request is accepted onto the QP (rdma_accept with its
 * qp_num), later ones are rejected. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "json.h"

/* jb_lit appends a string literal. */
#define jb_lit(b, s) jb_raw(b, s, sizeof(s) - 1)

#define PROTOCOL "softrdma-conform/1"
#define DEFAULT_PORT 7471
#define MAX_LINE (4 << 20)          /* a request line, as the Go side */
#define MAX_QUEUE_DEPTH 4096        /* max_send_wr, max_recv_wr, post_recv count */
#define MAX_REGION (16 << 20)       /* one reg_mr */
#define MAX_QPS 256                 /* QPs a session holds at once */
#define MAX_MRS 1024                /* regions a session holds at once */
#define MAX_AHS 64                  /* UD address handles a session holds */
#define MAX_GIDS 256

static const char *const ops[] = { "hello", "create_qp", "destroy_qp", "reg_mr", "write_mr", "read_mr",
	"post_recv", "post_send", "poll_cq", "query_qp", "reset" };

/* The device, opened once. */
static struct ibv_context *ctx;
static const char *devname;
static uint8_t ibport = 1;
static int gid_index_opt = -1;
static int iwarp;
static char listen_host[64]; /* iWARP: the address the QPs' listeners bind */
static struct ibv_port_attr port_attr;
static long long max_session_memory = 256LL << 20;
/* A session that sends nothing for this long is closed (ms): sessions are
 * served one at a time, so a silent client must not hold the server. */
static int idle_ms = 600 * 1000;

struct gid {
	int index;
	union ibv_gid gid;
	int type; /* enum ibv_gid_type; -1 unknown */
};
static struct gid gids[MAX_GIDS];
static int ngids;

struct sqp {
	struct ibv_qp *qp;
	struct ibv_cq *scq, *rcq;
	/* iWARP: the listener, the accepted connection, what the QP asked for,
	 * and how the connection ended. */
	struct rdma_cm_id *listen_id, *conn_id;
	uint8_t ird, ord;
	char conn_error[96];
};

struct smr {
	int h;
	struct ibv_mr *mr;
	unsigned char *buf;
	size_t len;
};

struct sah {
	union ibv_gid dgid;
	struct ibv_ah *ah;
};

/* A session: one connection's objects. */
static struct {
	struct ibv_pd *pd;
	struct sqp qps[MAX_QPS];
	int nqps;
	struct smr mrs[MAX_MRS];
	int nmrs, nextmr;
	long long memory;
	struct sah ahs[MAX_AHS];
	int nahs;
	struct rdma_event_channel *ch; /* iWARP: the listeners' and connections' events */
} ses;

/* An error answer is built in errbuf. */
static char errbuf[512];

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof errbuf, fmt, ap);
	va_end(ap);
	return -1;
}

static int mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

static enum ibv_mtu mtu_enum(uint64_t bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	return 0;
}

/* Arguments. */

/* check_fields refuses members of args that are not in allowed (as Go's
 * DisallowUnknownFields), and args that are not an object. */
static int check_fields(const struct jval *args, const char *const *allowed)
{
	size_t k;
	int a;

	if (!args || args->type == J_NULL)
		return 0;
	if (args->type != J_OBJ)
		return fail("bad arguments: want an object");
	for (k = 0; k < args->len; k++) {
		for (a = 0; allowed[a]; a++)
			if (strlen(allowed[a]) == args->keylens[k] && memcmp(allowed[a], args->keys[k], args->keylens[k]) == 0)
				break;
		if (!allowed[a]) {
			struct jbuf b = { 0 };

			jb_strn(&b, args->keys[k], args->keylens[k] > 64 ? 64 : args->keylens[k]);
			fail("bad arguments: json: unknown field %s", b.oom ? "?" : b.p);
			jb_free(&b);
			return -1;
		}
	}
	return 0;
}

/* get_u reads member key of args as an integer in [0, max] into *out; absent
 * or null leaves *out. */
static int get_u(const struct jval *args, const char *key, uint64_t max, uint64_t *out)
{
	const struct jval *v = json_get(args, key);

	if (!v || v->type == J_NULL)
		return 0;
	if (v->type != J_NUM || !v->is_uint || v->u > max)
		return fail("bad arguments: %s: want an integer in 0..%" PRIu64, key, max);
	*out = v->u;
	return 0;
}

static int get_bool(const struct jval *args, const char *key, int *out)
{
	const struct jval *v = json_get(args, key);

	if (!v || v->type == J_NULL)
		return 0;
	if (v->type != J_BOOL)
		return fail("bad arguments: %s: want true or false", key);
	*out = v->b;
	return 0;
}

/* get_str returns member key as a string (NULL if absent or null). */
static int get_str(const struct jval *args, const char *key, const struct jval **out)
{
	const struct jval *v = json_get(args, key);

	*out = NULL;
	if (!v || v->type == J_NULL)
		return 0;
	if (v->type != J_STR)
		return fail("bad arguments: %s: want a string", key);
	*out = v;
	return 0;
}

/* quote returns s as a JSON string in a static buffer, for error messages. */
static const char *quote(const struct jval *s)
{
	static char q[160];
	struct jbuf b = { 0 };

	if (!s)
		return "\"\"";
	jb_strn(&b, s->str, s->len > 40 ? 40 : s->len);
	snprintf(q, sizeof q, "%s%s", b.oom ? "?" : b.p, s->len > 40 ? "..." : "");
	jb_free(&b);
	return q;
}

/* get_access reads a list of access right names. */
static int get_access(const struct jval *args, int *out)
{
	const struct jval *v = json_get(args, "access");
	size_t k;

	*out = 0;
	if (!v || v->type == J_NULL)
		return 0;
	if (v->type != J_ARR)
		return fail("bad arguments: access: want a list of names");
	for (k = 0; k < v->len; k++) {
		const struct jval *n = &v->kids[k];

		if (n->type != J_STR)
			return fail("bad arguments: access: want a list of names");
		if (n->len == 12 && memcmp(n->str, "remote_write", 12) == 0)
			*out |= IBV_ACCESS_REMOTE_WRITE;
		else if (n->len == 11 && memcmp(n->str, "remote_read", 11) == 0)
			*out |= IBV_ACCESS_REMOTE_READ;
		else if (n->len == 13 && memcmp(n->str, "remote_atomic", 13) == 0)
			*out |= IBV_ACCESS_REMOTE_ATOMIC;
		else
			return fail("unknown access right %s", quote(n));
	}
	return 0;
}

/* gid_of parses an IP address (text) as its RoCE GID (IPv4: ::ffff:a.b.c.d). */
static int gid_of(const struct jval *ip, const char *what, union ibv_gid *g)
{
	char text[64];
	struct in_addr a4;

	if (!ip || ip->len == 0 || ip->len >= sizeof text || memchr(ip->str, 0, ip->len))
		return fail("%s %s: not an IP address", what, quote(ip));
	memcpy(text, ip->str, ip->len);
	text[ip->len] = 0;
	memset(g, 0, sizeof *g);
	if (inet_pton(AF_INET, text, &a4) == 1) {
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(&g->raw[12], &a4, 4);
		return 0;
	}
	if (inet_pton(AF_INET6, text, g->raw) == 1)
		return 0;
	return fail("%s %s: not an IP address", what, quote(ip));
}

static int is_v4mapped(const union ibv_gid *g)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(g->raw, pfx, 12) == 0;
}

static void gid_text(const union ibv_gid *g, char *out, size_t n)
{
	if (is_v4mapped(g))
		inet_ntop(AF_INET, &g->raw[12], out, (socklen_t)n);
	else
		inet_ntop(AF_INET6, g->raw, out, (socklen_t)n);
}

/* pick_gid returns the source GID index for traffic to dgid: --gid-index,
 * else the RoCE v2 GID of the address the kernel would send from to reach
 * dgid, else the first RoCE v2 GID of the same family (IPv4 or IPv6). */
static int pick_gid(const union ibv_gid *dgid)
{
	union ibv_gid src;
	int have_src = 0, k, v4 = is_v4mapped(dgid), first = -1;
	int s;

	if (gid_index_opt >= 0)
		return gid_index_opt;
	memset(&src, 0, sizeof src);
	s = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM, 0);
	if (s >= 0) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;

		memset(&ss, 0, sizeof ss);
		if (v4) {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			a->sin_family = AF_INET;
			a->sin_port = htons(4791);
			memcpy(&a->sin_addr, &dgid->raw[12], 4);
			sl = sizeof *a;
		} else {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			a->sin6_family = AF_INET6;
			a->sin6_port = htons(4791);
			memcpy(&a->sin6_addr, dgid->raw, 16);
			sl = sizeof *a;
		}
		if (connect(s, (struct sockaddr *)&ss, sl) == 0) {
			sl = sizeof ss;
			if (getsockname(s, (struct sockaddr *)&ss, &sl) == 0) {
				if (v4) {
					src.raw[10] = src.raw[11] = 0xff;
					memcpy(&src.raw[12], &((struct sockaddr_in *)&ss)->sin_addr, 4);
				} else {
					memcpy(src.raw, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
				}
				have_src = 1;
			}
		}
		close(s);
	}
	for (k = 0; k < ngids; k++) {
		const struct gid *g = &gids[k];

		if (g->type >= 0 && g->type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (is_v4mapped(&g->gid) != v4)
			continue;
		if (have_src && memcmp(g->gid.raw, src.raw, 16) == 0)
			return g->index;
		if (first < 0)
			first = g->index;
	}
	return first;
}

/* Session objects. */

static struct sqp *find_qp(uint64_t qpn)
{
	int k;

	for (k = 0; k < ses.nqps; k++)
		if (ses.qps[k].qp->qp_num == qpn)
			return &ses.qps[k];
	fail("no QP 0x%" PRIx64 " in this session", qpn);
	return NULL;
}

static struct smr *find_mr(uint64_t h)
{
	int k;

	for (k = 0; k < ses.nmrs; k++)
		if ((uint64_t)ses.mrs[k].h == h)
			return &ses.mrs[k];
	fail("no region %" PRIu64 " in this session", h);
	return NULL;
}

static void destroy_qp(struct sqp *q)
{
	if (q->conn_id)
		rdma_destroy_id(q->conn_id);
	if (q->listen_id)
		rdma_destroy_id(q->listen_id);
	if (q->qp)
		ibv_destroy_qp(q->qp);
	if (q->scq)
		ibv_destroy_cq(q->scq);
	if (q->rcq)
		ibv_destroy_cq(q->rcq);
	memset(q, 0, sizeof *q);
}

static void session_reset(void)
{
	int k;

	for (k = 0; k < ses.nqps; k++)
		destroy_qp(&ses.qps[k]);
	ses.nqps = 0;
	for (k = 0; k < ses.nahs; k++)
		ibv_destroy_ah(ses.ahs[k].ah);
	ses.nahs = 0;
	for (k = 0; k < ses.nmrs; k++) {
		ibv_dereg_mr(ses.mrs[k].mr);
		free(ses.mrs[k].buf);
	}
	ses.nmrs = 0;
	ses.memory = 0;
	if (ses.ch) {
		rdma_destroy_event_channel(ses.ch);
		ses.ch = NULL;
	}
	if (ses.pd) {
		ibv_dealloc_pd(ses.pd);
		ses.pd = NULL;
	}
}

static struct ibv_pd *pd(void)
{
	if (!ses.pd && !(ses.pd = ibv_alloc_pd(ctx)))
		fail("ibv_alloc_pd: %s", strerror(errno));
	return ses.pd;
}

static void ah_attr_for(const union ibv_gid *dgid, int sgid, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof *ah);
	ah->is_global = 1;
	ah->grh.dgid = *dgid;
	ah->grh.sgid_index = (uint8_t)sgid;
	ah->grh.hop_limit = 64;
	ah->port_num = ibport;
}

/* ah returns the session's UD address handle to ip. */
static struct ibv_ah *ah(const struct jval *ip)
{
	union ibv_gid g;
	struct ibv_ah_attr attr;
	int k, sgid;

	if (gid_of(ip, "remote_ip", &g))
		return NULL;
	for (k = 0; k < ses.nahs; k++)
		if (memcmp(ses.ahs[k].dgid.raw, g.raw, 16) == 0)
			return ses.ahs[k].ah;
	if (ses.nahs == MAX_AHS) {
		fail("the session holds %d address handles, at most %d (reset frees them)", ses.nahs, MAX_AHS);
		return NULL;
	}
	if ((sgid = pick_gid(&g)) < 0) {
		fail("remote_ip %s: the device has no RoCE v2 GID of its family", quote(ip));
		return NULL;
	}
	if (!pd())
		return NULL;
	ah_attr_for(&g, sgid, &attr);
	struct ibv_ah *h = ibv_create_ah(ses.pd, &attr);
	if (!h) {
		fail("ibv_create_ah to %s: %s", quote(ip), strerror(errno));
		return NULL;
	}
	ses.ahs[ses.nahs].dgid = g;
	ses.ahs[ses.nahs].ah = h;
	ses.nahs++;
	return h;
}

/* iWARP connections. */

/* iw_listen makes q listen for the tester's connection on listen_host, port
 * chosen by the system, and writes create_qp's result. */
static int iw_listen(struct sqp *q, struct jbuf *out)
{
	struct addrinfo hints, *ai;
	char port[8];
	int r;

	if (!ses.ch) {
		if (!(ses.ch = rdma_create_event_channel()))
			return fail("rdma_create_event_channel: %s", strerror(errno));
		fcntl(ses.ch->fd, F_SETFL, fcntl(ses.ch->fd, F_GETFL) | O_NONBLOCK);
	}
	if (rdma_create_id(ses.ch, &q->listen_id, (void *)(uintptr_t)q->qp->qp_num, RDMA_PS_TCP))
		return fail("rdma_create_id: %s", strerror(errno));
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
	hints.ai_socktype = SOCK_STREAM;
	if ((r = getaddrinfo(listen_host, "0", &hints, &ai)))
		return fail("listen address %s: %s", listen_host, gai_strerror(r));
	r = rdma_bind_addr(q->listen_id, ai->ai_addr);
	freeaddrinfo(ai);
	if (r)
		return fail("rdma_bind_addr %s: %s", listen_host, strerror(errno));
	if (rdma_listen(q->listen_id, 4))
		return fail("rdma_listen %s: %s", listen_host, strerror(errno));
	snprintf(port, sizeof port, "%u", ntohs(rdma_get_src_port(q->listen_id)));
	jb_printf(out, "\"qpn\":%u,\"state\":\"INIT\",\"path_mtu\":%d,\"pkey\":65535,\"listen_addr\":", q->qp->qp_num,
		  mtu_bytes(port_attr.active_mtu));
	{
		char a[96];

		snprintf(a, sizeof a, strchr(listen_host, ':') ? "[%s]:%s" : "%s:%s", listen_host, port);
		jb_str(out, a);
	}
	return 0;
}

static struct sqp *qp_by_num(uint32_t qpn)
{
	int k;

	for (k = 0; k < ses.nqps; k++)
		if (ses.qps[k].qp->qp_num == qpn)
			return &ses.qps[k];
	return NULL;
}

/* iw_events handles the connection events waiting on the session's channel:
 * the first connection request to a QP's listener is accepted onto the QP (in
 * INIT, its receives posted), later ones are rejected; how a connection ends
 * is kept for query_qp's conn_error. */
static void iw_events(void)
{
	struct rdma_cm_event *ev;

	while (ses.ch && rdma_get_cm_event(ses.ch, &ev) == 0) {
		struct rdma_cm_id *id = ev->id;
		struct sqp *q = qp_by_num((uint32_t)(uintptr_t)(ev->listen_id ? ev->listen_id->context : id->context));

		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct rdma_conn_param p;

			if (!q || q->conn_id) {
				rdma_reject(id, NULL, 0);
				rdma_ack_cm_event(ev);
				rdma_destroy_id(id);
				continue;
			}
			memset(&p, 0, sizeof p);
			p.responder_resources = q->ird;
			p.initiator_depth = q->ord;
			p.qp_num = q->qp->qp_num;
			id->context = (void *)(uintptr_t)q->qp->qp_num;
			if (rdma_accept(id, &p)) {
				snprintf(q->conn_error, sizeof q->conn_error, "rdma_accept: %s", strerror(errno));
				rdma_reject(id, NULL, 0);
				rdma_ack_cm_event(ev);
				rdma_destroy_id(id);
				continue;
			}
			q->conn_id = id;
		} else if (q && id == q->conn_id && ev->event != RDMA_CM_EVENT_ESTABLISHED) {
			snprintf(q->conn_error, sizeof q->conn_error, "%s (status %d)", rdma_event_str(ev->event), ev->status);
		}
		rdma_ack_cm_event(ev);
	}
}

/* Operations. Each writes its result (the members of the result object,
 * without braces; nothing for none) to out, or returns -1 with errbuf set. */

static int op_hello(struct jbuf *out)
{
	int k, first = 1;

	jb_printf(out, "\"protocol\":\"%s\",\"implementation\":", PROTOCOL);
	{
		char impl[128];
		snprintf(impl, sizeof impl, "conform-ctl (libibverbs %s)", devname);
		jb_str(out, impl);
	}
	jb_printf(out, ",\"transport\":\"%s\",\"addrs\":[", iwarp ? "iwarp" : "roce");
	if (iwarp) {
		jb_str(out, listen_host);
		first = 0;
	}
	for (k = 0; !iwarp && k < ngids; k++) {
		char t[INET6_ADDRSTRLEN];

		if (gids[k].type >= 0 && gids[k].type != IBV_GID_TYPE_ROCE_V2)
			continue;
		gid_text(&gids[k].gid, t, sizeof t);
		jb_printf(out, "%s\"%s\"", first ? "" : ",", t);
		first = 0;
	}
	jb_printf(out, "],\"path_mtu\":%d,\"pkeys\":[", mtu_bytes(port_attr.active_mtu));
	first = 1;
	for (k = 0; k < port_attr.pkey_tbl_len && k < 64; k++) {
		uint16_t pk;

		if (ibv_query_pkey(ctx, ibport, k, &pk) || pk == 0)
			continue;
		jb_printf(out, "%s%u", first ? "" : ",", ntohs(pk));
		first = 0;
	}
	{
		uint16_t one = 1;
		jb_printf(out, "],\"byte_order\":\"%s\",\"ops\":[", *(uint8_t *)&one ? "little" : "big");
	}
	for (k = 0; k < (int)(sizeof ops / sizeof ops[0]); k++)
		jb_printf(out, "%s\"%s\"", k ? "," : "", ops[k]);
	jb_lit(out, "]");
	return 0;
}

static int op_create_qp(const struct jval *a, struct jbuf *out)
{
	static const char *const f[] = { "type", "remote_ip", "remote_qpn", "rq_psn", "sq_psn", "access", "path_mtu",
		"min_rnr_timer", "timeout", "retry_cnt", "rnr_retry", "max_rd_atomic", "max_dest_rd_atomic", "qkey",
		"max_send_wr", "max_recv_wr", "mpa_crc", NULL };
	const struct jval *type, *rip, *crc;
	uint64_t rqpn = 0, rqpsn = 0, sqpsn = 0, mtu = 0, rnrt = 0, timeout = 0, retry = 0, rnr = 0, rd = 0,
		 destrd = 0, qkey = 0, sw = 0, rw = 0;
	int access, sgid = 0;
	enum ibv_qp_type qt;
	union ibv_gid dgid;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr at;
	struct sqp q = { 0 };
	enum ibv_mtu pmtu = port_attr.active_mtu;

	if (check_fields(a, f) || get_str(a, "type", &type) || get_str(a, "remote_ip", &rip) ||
	    get_str(a, "mpa_crc", &crc) || get_u(a, "remote_qpn", 0xffffff, &rqpn) ||
	    get_u(a, "rq_psn", 0xffffff, &rqpsn) || get_u(a, "sq_psn", 0xffffff, &sqpsn) ||
	    get_access(a, &access) || get_u(a, "path_mtu", 1 << 20, &mtu) ||
	    get_u(a, "min_rnr_timer", 31, &rnrt) || get_u(a, "timeout", 31, &timeout) ||
	    get_u(a, "retry_cnt", 7, &retry) || get_u(a, "rnr_retry", 7, &rnr) ||
	    get_u(a, "max_rd_atomic", 255, &rd) || get_u(a, "max_dest_rd_atomic", 255, &destrd) ||
	    get_u(a, "qkey", 0xffffffff, &qkey) || get_u(a, "max_send_wr", 1 << 30, &sw) ||
	    get_u(a, "max_recv_wr", 1 << 30, &rw))
		return -1;
	if (type && type->len == 2 && memcmp(type->str, "rc", 2) == 0)
		qt = IBV_QPT_RC;
	else if (type && type->len == 2 && memcmp(type->str, "uc", 2) == 0)
		qt = IBV_QPT_UC;
	else if (type && type->len == 2 && memcmp(type->str, "ud", 2) == 0)
		qt = IBV_QPT_UD;
	else
		return fail("type %s: want rc, uc or ud", quote(type));
	if (iwarp && qt != IBV_QPT_RC)
		return fail("type %s: an iWARP device has RC QPs only", quote(type));
	if (iwarp && crc && !(crc->len == 0 || (crc->len == 6 && memcmp(crc->str, "accept", 6) == 0)))
		return fail("mpa_crc %s: the verbs API cannot choose an iWARP QP's MPA CRC policy (the device's own applies): accept only", quote(crc));
	if (sw > MAX_QUEUE_DEPTH || rw > MAX_QUEUE_DEPTH)
		return fail("queue depths %" PRIu64 "/%" PRIu64 ": at most %d", sw, rw, MAX_QUEUE_DEPTH);
	if (mtu && !(pmtu = mtu_enum(mtu)))
		return fail("path_mtu %" PRIu64 ": want 256, 512, 1024, 2048 or 4096 (0: the port's)", mtu);
	if (qt != IBV_QPT_UD && !iwarp) {
		if (gid_of(rip, "remote_ip", &dgid))
			return -1;
		if ((sgid = pick_gid(&dgid)) < 0)
			return fail("remote_ip %s: the device has no RoCE v2 GID of its family", quote(rip));
	}
	if (ses.nqps == MAX_QPS)
		return fail("the session holds %d QPs, at most %d (reset frees them)", ses.nqps, MAX_QPS);
	if (!sw)
		sw = 16;
	if (!rw)
		rw = 16;
	if (!pd())
		return -1;
	if (!(q.scq = ibv_create_cq(ctx, (int)sw + 16, NULL, NULL, 0)) ||
	    !(q.rcq = ibv_create_cq(ctx, (int)rw + 16, NULL, NULL, 0))) {
		fail("ibv_create_cq: %s", strerror(errno));
		goto bad;
	}
	memset(&ia, 0, sizeof ia);
	ia.send_cq = q.scq;
	ia.recv_cq = q.rcq;
	ia.qp_type = qt;
	ia.sq_sig_all = 1;
	ia.cap.max_send_wr = (uint32_t)sw;
	ia.cap.max_recv_wr = (uint32_t)rw;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	if (!(q.qp = ibv_create_qp(ses.pd, &ia))) {
		fail("ibv_create_qp: %s", strerror(errno));
		goto bad;
	}
	memset(&at, 0, sizeof at);
	at.qp_state = IBV_QPS_INIT;
	at.pkey_index = 0;
	at.port_num = ibport;
	if (iwarp) {
		q.ird = (uint8_t)(destrd ? destrd : 1);
		q.ord = (uint8_t)(rd ? rd : 1);
		at.qp_access_flags = access;
		if (ibv_modify_qp(q.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
			fail("ibv_modify_qp to INIT: %s", strerror(errno));
			goto bad;
		}
		if (iw_listen(&q, out))
			goto bad;
		ses.qps[ses.nqps++] = q;
		return 0;
	}
	if (qt == IBV_QPT_UD) {
		at.qkey = (uint32_t)qkey;
		if (ibv_modify_qp(q.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
			fail("ibv_modify_qp to INIT: %s", strerror(errno));
			goto bad;
		}
		memset(&at, 0, sizeof at);
		at.qp_state = IBV_QPS_RTR;
		if (ibv_modify_qp(q.qp, &at, IBV_QP_STATE)) {
			fail("ibv_modify_qp to RTR: %s", strerror(errno));
			goto bad;
		}
		memset(&at, 0, sizeof at);
		at.qp_state = IBV_QPS_RTS;
		at.sq_psn = (uint32_t)sqpsn;
		if (ibv_modify_qp(q.qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
			fail("ibv_modify_qp to RTS: %s", strerror(errno));
			goto bad;
		}
	} else {
		int mask;

		at.qp_access_flags = access;
		if (ibv_modify_qp(q.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
			fail("ibv_modify_qp to INIT: %s", strerror(errno));
			goto bad;
		}
		memset(&at, 0, sizeof at);
		at.qp_state = IBV_QPS_RTR;
		ah_attr_for(&dgid, sgid, &at.ah_attr);
		at.path_mtu = pmtu;
		at.dest_qp_num = (uint32_t)rqpn;
		at.rq_psn = (uint32_t)rqpsn;
		mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qt == IBV_QPT_RC) {
			at.max_dest_rd_atomic = (uint8_t)(destrd ? destrd : 1);
			at.min_rnr_timer = (uint8_t)rnrt;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
		if (ibv_modify_qp(q.qp, &at, mask)) {
			fail("ibv_modify_qp to RTR (GID index %d, path MTU %d): %s", sgid, mtu_bytes(pmtu), strerror(errno));
			goto bad;
		}
		memset(&at, 0, sizeof at);
		at.qp_state = IBV_QPS_RTS;
		at.sq_psn = (uint32_t)sqpsn;
		mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (qt == IBV_QPT_RC) {
			at.timeout = (uint8_t)timeout;
			at.retry_cnt = (uint8_t)retry;
			at.rnr_retry = (uint8_t)rnr;
			at.max_rd_atomic = (uint8_t)(rd ? rd : 1);
			mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		}
		if (ibv_modify_qp(q.qp, &at, mask)) {
			fail("ibv_modify_qp to RTS: %s", strerror(errno));
			goto bad;
		}
	}
	{
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		uint16_t pk = 0xffff;
		int m = mtu_bytes(pmtu);

		if (qt != IBV_QPT_UD && ibv_query_qp(q.qp, &qa, IBV_QP_PATH_MTU, &qi) == 0 && mtu_bytes(qa.path_mtu))
			m = mtu_bytes(qa.path_mtu);
		if (qt == IBV_QPT_UD)
			m = mtu_bytes(port_attr.active_mtu);
		if (ibv_query_pkey(ctx, ibport, 0, &pk) == 0)
			pk = ntohs(pk);
		ses.qps[ses.nqps++] = q;
		jb_printf(out, "\"qpn\":%u,\"state\":\"RTS\",\"path_mtu\":%d,\"pkey\":%u", q.qp->qp_num, m, pk);
	}
	return 0;
bad:
	destroy_qp(&q);
	return -1;
}

static int op_qp(const struct jval *a, struct jbuf *out, int query)
{
	static const char *const f[] = { "qpn", NULL };
	static const char *const states[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };
	uint64_t qpn = 0;
	struct sqp *q;

	if (check_fields(a, f) || get_u(a, "qpn", 0xffffffff, &qpn) || !(q = find_qp(qpn)))
		return -1;
	if (query) {
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;

		if (ibv_query_qp(q->qp, &qa, IBV_QP_STATE, &qi))
			return fail("ibv_query_qp: %s", strerror(errno));
		if ((unsigned)qa.qp_state < sizeof states / sizeof states[0])
			jb_printf(out, "\"qpn\":%" PRIu64 ",\"state\":\"%s\"", qpn, states[qa.qp_state]);
		else
			jb_printf(out, "\"qpn\":%" PRIu64 ",\"state\":\"QPState(%d)\"", qpn, (int)qa.qp_state);
		if (q->conn_error[0]) {
			jb_lit(out, ",\"conn_error\":");
			jb_str(out, q->conn_error);
		}
		return 0;
	}
	destroy_qp(q);
	*q = ses.qps[--ses.nqps];
	memset(&ses.qps[ses.nqps], 0, sizeof ses.qps[0]);
	return 0;
}

static int op_reg_mr(const struct jval *a, struct jbuf *out)
{
	static const char *const f[] = { "length", "access", "fill", NULL };
	uint64_t len = 0, fill = 0;
	int access;
	struct smr m = { 0 };

	if (check_fields(a, f) || get_u(a, "length", UINT64_MAX, &len) || get_access(a, &access) ||
	    get_u(a, "fill", 255, &fill))
		return -1;
	if (len < 1 || len > MAX_REGION)
		return fail("length %" PRIu64 ": want 1..%d", len, MAX_REGION);
	if (ses.memory + (long long)len > max_session_memory)
		return fail("length %" PRIu64 ": session memory limit: the session's regions hold %lld octets, at most %lld (reset frees them)",
			    len, ses.memory, max_session_memory);
	if (ses.nmrs == MAX_MRS)
		return fail("the session holds %d regions, at most %d (reset frees them)", ses.nmrs, MAX_MRS);
	if (!pd())
		return -1;
	if (posix_memalign((void **)&m.buf, 4096, len))
		return fail("length %" PRIu64 ": out of memory", len);
	memset(m.buf, (int)fill, len);
	m.mr = ibv_reg_mr(ses.pd, m.buf, len, access | IBV_ACCESS_LOCAL_WRITE);
	if (!m.mr) {
		free(m.buf);
		return fail("ibv_reg_mr: %s", strerror(errno));
	}
	m.len = len;
	m.h = ++ses.nextmr;
	ses.mrs[ses.nmrs++] = m;
	ses.memory += (long long)len;
	jb_printf(out, "\"mr\":%d,\"va\":%" PRIu64 ",\"rkey\":%u,\"lkey\":%u,\"length\":%" PRIu64, m.h,
		  (uint64_t)(uintptr_t)m.buf, m.mr->rkey, m.mr->lkey, len);
	return 0;
}

static int op_mem(const struct jval *a, struct jbuf *out, int write)
{
	static const char *const f[] = { "mr", "offset", "length", "data", NULL };
	uint64_t h = 0, off = 0, n = 0;
	const struct jval *data;
	struct smr *m;
	unsigned char *bytes = NULL;
	size_t nb = 0;

	if (check_fields(a, f) || get_u(a, "mr", UINT64_MAX, &h) || get_u(a, "offset", UINT64_MAX, &off) ||
	    get_u(a, "length", UINT64_MAX, &n) || get_str(a, "data", &data))
		return -1;
	if (data && !(bytes = base64_decode(data->str, data->len, &nb)))
		return fail("bad arguments: data: not base64");
	if (!(m = find_mr(h))) {
		free(bytes);
		return -1;
	}
	if (write)
		n = nb;
	if (off > m->len || n > m->len - off) {
		free(bytes);
		return fail("range %" PRIu64 "+%" PRIu64 " outside region of %zu bytes", off, n, m->len);
	}
	if (write) {
		if (n)
			memcpy(m->buf + off, bytes, n);
		free(bytes);
		return 0;
	}
	free(bytes);
	jb_printf(out, "\"mr\":%" PRIu64 ",\"offset\":%" PRIu64, h, off);
	if (n) {
		jb_printf(out, ",\"length\":%" PRIu64 ",\"data\":", n);
		jb_base64(out, m->buf + off, n);
	}
	return 0;
}

static int op_post_recv(const struct jval *a)
{
	static const char *const f[] = { "qpn", "mr", "offset", "length", "count", "wr_id", NULL };
	uint64_t qpn = 0, h = 0, off = 0, len = 0, count = 0, wrid = 0, k;
	struct sqp *q;
	struct smr *m;
	struct ibv_recv_wr *wrs, *bad;
	struct ibv_sge *sges;
	int ret;

	if (check_fields(a, f) || get_u(a, "qpn", 0xffffffff, &qpn) || get_u(a, "mr", UINT64_MAX, &h) ||
	    get_u(a, "offset", UINT64_MAX, &off) || get_u(a, "length", UINT32_MAX, &len) ||
	    get_u(a, "count", UINT64_MAX, &count) || get_u(a, "wr_id", UINT64_MAX, &wrid))
		return -1;
	if (!(q = find_qp(qpn)) || !(m = find_mr(h)))
		return -1;
	if (!count)
		count = 1;
	if (count > MAX_QUEUE_DEPTH || off > m->len || len > MAX_REGION || count * len > m->len - off)
		return fail("%" PRIu64 " receives of %" PRIu64 " bytes from offset %" PRIu64 " do not fit the region of %zu bytes",
			    count, len, off, m->len);
	wrs = calloc(count, sizeof *wrs);
	sges = calloc(count, sizeof *sges);
	if (!wrs || !sges) {
		free(wrs);
		free(sges);
		return fail("out of memory");
	}
	for (k = 0; k < count; k++) {
		sges[k].addr = (uint64_t)(uintptr_t)(m->buf + off + k * len);
		sges[k].length = (uint32_t)len;
		sges[k].lkey = m->mr->lkey;
		wrs[k].wr_id = wrid + k;
		wrs[k].sg_list = &sges[k];
		wrs[k].num_sge = 1;
		wrs[k].next = k + 1 < count ? &wrs[k + 1] : NULL;
	}
	ret = ibv_post_recv(q->qp, wrs, &bad);
	if (ret)
		fail("ibv_post_recv (WR %" PRIu64 " of %" PRIu64 "): %s", (uint64_t)(bad - wrs), count, strerror(ret));
	free(wrs);
	free(sges);
	return ret ? -1 : 0;
}

static int op_post_send(const struct jval *a)
{
	static const char *const f[] = { "qpn", "opcode", "mr", "offset", "length", "remote_va", "rkey", "imm",
		"compare_add", "swap", "wr_id", "remote_ip", "remote_qpn", "remote_qkey", NULL };
	static const struct { const char *name; enum ibv_wr_opcode op; } opcodes[] = {
		{ "send", IBV_WR_SEND }, { "send_imm", IBV_WR_SEND_WITH_IMM }, { "write", IBV_WR_RDMA_WRITE },
		{ "write_imm", IBV_WR_RDMA_WRITE_WITH_IMM }, { "read", IBV_WR_RDMA_READ },
		{ "cmp_swap", IBV_WR_ATOMIC_CMP_AND_SWP }, { "fetch_add", IBV_WR_ATOMIC_FETCH_AND_ADD },
	};
	uint64_t qpn = 0, h = 0, off = 0, len = 0, rva = 0, rkey = 0, imm = 0, cmp = 0, swap = 0, wrid = 0,
		 rqpn = 0, rqkey = 0;
	const struct jval *opname, *rip;
	struct sqp *q;
	struct smr *m;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	size_t k;
	int ret;

	if (check_fields(a, f) || get_u(a, "qpn", 0xffffffff, &qpn) || get_str(a, "opcode", &opname) ||
	    get_u(a, "mr", UINT64_MAX, &h) || get_u(a, "offset", UINT64_MAX, &off) ||
	    get_u(a, "length", UINT32_MAX, &len) || get_u(a, "remote_va", UINT64_MAX, &rva) ||
	    get_u(a, "rkey", UINT32_MAX, &rkey) || get_u(a, "imm", UINT32_MAX, &imm) ||
	    get_u(a, "compare_add", UINT64_MAX, &cmp) || get_u(a, "swap", UINT64_MAX, &swap) ||
	    get_u(a, "wr_id", UINT64_MAX, &wrid) || get_str(a, "remote_ip", &rip) ||
	    get_u(a, "remote_qpn", 0xffffff, &rqpn) || get_u(a, "remote_qkey", UINT32_MAX, &rqkey))
		return -1;
	if (!(q = find_qp(qpn)))
		return -1;
	memset(&wr, 0, sizeof wr);
	for (k = 0; k < sizeof opcodes / sizeof opcodes[0]; k++)
		if (opname && opname->len == strlen(opcodes[k].name) && memcmp(opname->str, opcodes[k].name, opname->len) == 0)
			break;
	if (k == sizeof opcodes / sizeof opcodes[0])
		return fail("opcode %s: unknown", quote(opname));
	wr.opcode = opcodes[k].op;
	if (!(m = find_mr(h)))
		return -1;
	if (off > m->len || len > m->len - off)
		return fail("%" PRIu64 " bytes at offset %" PRIu64 " do not fit the region of %zu bytes", len, off, m->len);
	sge.addr = (uint64_t)(uintptr_t)(m->buf + off);
	sge.length = (uint32_t)len;
	sge.lkey = m->mr->lkey;
	wr.wr_id = wrid;
	wr.sg_list = &sge;
	wr.num_sge = len ? 1 : 0;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl((uint32_t)imm);
	if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = rva;
		wr.wr.atomic.rkey = (uint32_t)rkey;
		wr.wr.atomic.compare_add = cmp;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = rva;
		wr.wr.rdma.rkey = (uint32_t)rkey;
	}
	if (q->qp->qp_type == IBV_QPT_UD) {
		memset(&wr.wr, 0, sizeof wr.wr);
		if (!(wr.wr.ud.ah = ah(rip)))
			return -1;
		wr.wr.ud.remote_qpn = (uint32_t)rqpn;
		wr.wr.ud.remote_qkey = (uint32_t)rqkey;
	}
	ret = ibv_post_send(q->qp, &wr, &bad);
	if (ret)
		return fail("ibv_post_send: %s", strerror(ret));
	return 0;
}

static const char *wc_status_name(enum ibv_wc_status s, char *buf, size_t n)
{
	static const char *const names[] = { "IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR",
		"IBV_WC_LOC_EEC_OP_ERR", "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR",
		"IBV_WC_BAD_RESP_ERR", "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR",
		"IBV_WC_REM_OP_ERR", "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
		"IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR",
		"IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR", "IBV_WC_TM_ERR",
		"IBV_WC_TM_RNDV_INCOMPLETE" };

	if ((unsigned)s < sizeof names / sizeof names[0])
		return names[s];
	snprintf(buf, n, "WCStatus(%d)", (int)s);
	return buf;
}

static const char *wc_opcode_name(enum ibv_wc_opcode o, char *buf, size_t n)
{
	switch ((int)o) {
	case IBV_WC_SEND: return "IBV_WC_SEND";
	case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
	case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
	case IBV_WC_BIND_MW: return "IBV_WC_BIND_MW";
	case IBV_WC_LOCAL_INV: return "IBV_WC_LOCAL_INV";
	case IBV_WC_RECV: return "IBV_WC_RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
	}
	snprintf(buf, n, "WCOpcode(%d)", (int)o);
	return buf;
}

static int op_poll_cq(const struct jval *a, struct jbuf *out)
{
	static const char *const f[] = { "qpn", "recv", "max", NULL };
	uint64_t qpn = 0, max = 0;
	int recv = 0, n, k;
	struct sqp *q;
	struct ibv_wc wc[64];

	if (check_fields(a, f) || get_u(a, "qpn", 0xffffffff, &qpn) || get_bool(a, "recv", &recv) ||
	    get_u(a, "max", UINT64_MAX, &max) || !(q = find_qp(qpn)))
		return -1;
	if (max == 0 || max > 1024)
		max = 64;
	jb_lit(out, "\"completions\":[");
	for (int first = 1; max > 0; max -= (uint64_t)n) {
		n = ibv_poll_cq(recv ? q->rcq : q->scq, max < 64 ? (int)max : 64, wc);
		if (n < 0)
			return fail("ibv_poll_cq: %d", n);
		for (k = 0; k < n; k++) {
			char b1[32], b2[32];
			unsigned fl = wc[k].wc_flags;

			jb_printf(out, "%s{\"wr_id\":%" PRIu64 ",\"status\":\"%s\",\"opcode\":\"%s\",\"byte_len\":%u", first ? "" : ",",
				  (uint64_t)wc[k].wr_id, wc_status_name(wc[k].status, b1, sizeof b1),
				  wc_opcode_name(wc[k].opcode, b2, sizeof b2), wc[k].byte_len);
			first = 0;
			if ((fl & IBV_WC_WITH_IMM) && wc[k].imm_data)
				jb_printf(out, ",\"imm\":%u", ntohl(wc[k].imm_data));
			if (wc[k].src_qp)
				jb_printf(out, ",\"src_qp\":%u", wc[k].src_qp);
			fl &= IBV_WC_GRH | IBV_WC_WITH_IMM | IBV_WC_WITH_INV;
			if (fl)
				jb_printf(out, ",\"flags\":\"%s%s%s%s%s\"", fl & IBV_WC_GRH ? "GRH" : "",
					  (fl & IBV_WC_GRH) && (fl & ~IBV_WC_GRH) ? "|" : "",
					  fl & IBV_WC_WITH_IMM ? "WITH_IMM" : "",
					  (fl & IBV_WC_WITH_IMM) && (fl & IBV_WC_WITH_INV) ? "|" : "",
					  fl & IBV_WC_WITH_INV ? "WITH_INV" : "");
			jb_lit(out, "}");
		}
		if (n == 0)
			break;
	}
	jb_lit(out, "]");
	return 0;
}

/* dispatch runs one request; the answer goes to out. */
static void dispatch(const char *line, size_t n, struct jbuf *out)
{
	char perr[128];
	struct jval *req = json_parse(line, n, perr, sizeof perr);
	const struct jval *id, *op, *args;
	uint64_t rid = 0;
	struct jbuf res = { 0 };
	int ret = -1;

	errbuf[0] = 0;
	if (!req) {
		jb_lit(out, "{\"id\":0,\"ok\":false,\"error\":");
		snprintf(errbuf, sizeof errbuf, "bad request: %s", perr);
		jb_str(out, errbuf);
		jb_lit(out, "}");
		return;
	}
	if (req->type != J_OBJ && req->type != J_NULL) {
		fail("bad request: want a JSON object");
		goto answer;
	}
	id = json_get(req, "id");
	op = json_get(req, "op");
	args = json_get(req, "args");
	if (id && id->type != J_NULL) {
		if (id->type != J_NUM || !id->is_uint) {
			fail("bad request: id: want an integer in 0..%" PRIu64, UINT64_MAX);
			goto answer;
		}
		rid = id->u;
	}
	if (op && op->type != J_NULL && op->type != J_STR) {
		fail("bad request: op: want a string");
		goto answer;
	}
#define IS(name) (op && op->type == J_STR && op->len == strlen(name) && memcmp(op->str, name, op->len) == 0)
	if (IS("hello"))
		ret = op_hello(&res);
	else if (IS("create_qp"))
		ret = op_create_qp(args, &res);
	else if (IS("destroy_qp"))
		ret = op_qp(args, &res, 0);
	else if (IS("query_qp"))
		ret = op_qp(args, &res, 1);
	else if (IS("reg_mr"))
		ret = op_reg_mr(args, &res);
	else if (IS("write_mr"))
		ret = op_mem(args, &res, 1);
	else if (IS("read_mr"))
		ret = op_mem(args, &res, 0);
	else if (IS("post_recv"))
		ret = op_post_recv(args);
	else if (IS("post_send"))
		ret = op_post_send(args);
	else if (IS("poll_cq"))
		ret = op_poll_cq(args, &res);
	else if (IS("reset")) {
		session_reset();
		ret = 0;
	} else
		fail("unsupported operation");
#undef IS
	if (ret == 0 && res.oom)
		ret = fail("out of memory writing the result");
answer:
	jb_printf(out, "{\"id\":%" PRIu64 ",\"ok\":%s", rid, ret == 0 ? "true" : "false");
	if (ret == 0 && res.len) {
		jb_lit(out, ",\"result\":{");
		jb_raw(out, res.p, res.len);
		jb_lit(out, "}");
	} else if (ret != 0) {
		jb_lit(out, ",\"error\":");
		jb_str(out, errbuf);
	}
	jb_lit(out, "}");
	jb_free(&res);
	json_free(req);
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* serve runs one session on fd until it closes (or sends a line longer than
 * MAX_LINE, as the Go side: the connection is closed unanswered), then
 * destroys what it created. */
static void serve(int fd)
{
	size_t cap = 64 << 10, len = 0, scan = 0;
	char *buf = malloc(cap);

	while (buf) {
		char *nl = memchr(buf + scan, '\n', len - scan);

		if (nl) {
			size_t ln = (size_t)(nl - buf) + 1;
			struct jbuf out = { 0 };

			iw_events();
			dispatch(buf, ln, &out);
			jb_raw(&out, "\n", 1);
			if (out.oom) {
				jb_free(&out);
				break;
			}
			if (write_all(fd, out.p, out.len)) {
				jb_free(&out);
				break;
			}
			jb_free(&out);
			memmove(buf, buf + ln, len - ln);
			len -= ln;
			scan = 0;
			continue;
		}
		scan = len;
		if (len > MAX_LINE)
			break;
		if (len == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
		{
			/* Wait for the next request (while answering the
			 * tester's connections to the QPs' listeners), at
			 * most idle_ms. */
			struct pollfd pf[2] = { { .fd = fd, .events = POLLIN }, { .fd = ses.ch ? ses.ch->fd : -1, .events = POLLIN } };
			int n = poll(pf, 2, idle_ms);

			if (n < 0 && errno != EINTR)
				break;
			if (n == 0) {
				fprintf(stderr, "conform-ctl: closing a session idle for %d s\n", idle_ms / 1000);
				break;
			}
			if (pf[1].revents)
				iw_events();
			if (!pf[0].revents)
				continue;
		}
		ssize_t r = read(fd, buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	free(buf);
	close(fd);
	session_reset();
}

static int listen_on(const char *spec, char *where, size_t wn)
{
	char host[256], port[16];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints, *ai, *p;
	int s = -1, one = 1, r;

	if (!colon || (size_t)(colon - spec) >= sizeof host || strlen(colon + 1) >= sizeof port) {
		fprintf(stderr, "conform-ctl: --listen %s: want HOST:PORT\n", spec);
		return -1;
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = 0;
	strcpy(port, colon + 1);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if ((r = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai))) {
		fprintf(stderr, "conform-ctl: --listen %s: %s\n", spec, gai_strerror(r));
		return -1;
	}
	for (p = ai; p; p = p->ai_next) {
		s = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
		if (s < 0)
			continue;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(s, p->ai_addr, p->ai_addrlen) == 0 && listen(s, 8) == 0)
			break;
		close(s);
		s = -1;
	}
	freeaddrinfo(ai);
	if (s < 0) {
		fprintf(stderr, "conform-ctl: --listen %s: %s\n", spec, strerror(errno));
		return -1;
	}
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		char h[INET6_ADDRSTRLEN];

		getsockname(s, (struct sockaddr *)&ss, &sl);
		if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
			snprintf(where, wn, "[%s]:%u", h, ntohs(a->sin6_port));
		} else {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
			snprintf(where, wn, "%s:%u", h, ntohs(a->sin_port));
		}
	}
	return s;
}

static void usage(void)
{
	fprintf(stderr, "usage: conform-ctl [--listen ADDR:PORT] [--device NAME] [--addr IP] [--ib-port N] [--gid-index N] [--max-session-memory OCTETS] [--idle-timeout SECONDS]\n\n"
			"Serves softrdma's conformance control protocol (conform/CONTROL.md) for a libibverbs\n"
			"device (default: the first), on 127.0.0.1:%d unless --listen says otherwise\n"
			"(port 0: any; the line printed says which), one session (connection) at a time;\n"
			"a session silent for --idle-timeout seconds (default 600) is closed. Test it with\n"
			"softrdma conform --peer HOST:PORT --peer-ip IP. On an iWARP device the QPs listen\n"
			"for the tester's connections on --addr (default: the --listen host).\n", DEFAULT_PORT);
}

/* num parses a decimal argument in [lo, hi]. */
static int num(const char *flag, const char *s, long long lo, long long hi, long long *out)
{
	char *end;

	errno = 0;
	*out = strtoll(s, &end, 10);
	if (errno || *s == 0 || *end || *out < lo || *out > hi) {
		fprintf(stderr, "conform-ctl: %s %s: want a number in %lld..%lld\n", flag, s, lo, hi);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *listen_spec = "127.0.0.1:7471", *want = NULL;
	struct ibv_device **list;
	struct ibv_device_attr da;
	char where[128];
	int k, n, ls;
	long long v;

	for (k = 1; k < argc; k++) {
		const char *a = argv[k];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage();
			return 0;
		}
		if (k + 1 >= argc) {
			fprintf(stderr, "conform-ctl: %s: unknown flag or missing value\n", a);
			usage();
			return 2;
		}
		if (!strcmp(a, "--listen"))
			listen_spec = argv[++k];
		else if (!strcmp(a, "--addr")) {
			if (strlen(argv[k + 1]) >= sizeof listen_host) {
				fprintf(stderr, "conform-ctl: --addr %s: too long\n", argv[k + 1]);
				return 2;
			}
			strcpy(listen_host, argv[++k]);
		} else if (!strcmp(a, "--device") || !strcmp(a, "-d"))
			want = argv[++k];
		else if (!strcmp(a, "--ib-port") || !strcmp(a, "-i")) {
			if (num(a, argv[++k], 1, 255, &v))
				return 2;
			ibport = (uint8_t)v;
		} else if (!strcmp(a, "--gid-index") || !strcmp(a, "-g")) {
			if (num(a, argv[++k], 0, 255, &v))
				return 2;
			gid_index_opt = (int)v;
		} else if (!strcmp(a, "--idle-timeout")) {
			if (num(a, argv[++k], 1, 86400, &v))
				return 2;
			idle_ms = (int)v * 1000;
		} else if (!strcmp(a, "--max-session-memory")) {
			if (num(a, argv[++k], 1, 1LL << 40, &v))
				return 2;
			max_session_memory = v;
		} else {
			fprintf(stderr, "conform-ctl: %s: unknown flag\n", a);
			usage();
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		fprintf(stderr, "conform-ctl: no RDMA device (ibv_get_device_list: %s)\n", list ? "none" : strerror(errno));
		return 1;
	}
	for (k = 0; k < n; k++)
		if (!want || !strcmp(ibv_get_device_name(list[k]), want))
			break;
	if (k == n) {
		fprintf(stderr, "conform-ctl: --device %s: no such device\n", want);
		return 1;
	}
	devname = strdup(ibv_get_device_name(list[k]));
	iwarp = list[k]->transport_type == IBV_TRANSPORT_IWARP;
	if (!(ctx = ibv_open_device(list[k]))) {
		fprintf(stderr, "conform-ctl: ibv_open_device %s: %s\n", devname, strerror(errno));
		return 1;
	}
	ibv_free_device_list(list);
	if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, ibport, &port_attr)) {
		fprintf(stderr, "conform-ctl: %s port %u: %s\n", devname, ibport, strerror(errno));
		return 1;
	}
	for (k = 0; k < port_attr.gid_tbl_len && ngids < MAX_GIDS; k++) {
		struct ibv_gid_entry e;
		struct gid g = { .index = k, .type = -1 };
		static const union ibv_gid zero;

		if (ibv_query_gid_ex(ctx, ibport, (uint32_t)k, &e, 0) == 0) {
			g.gid = e.gid;
			g.type = (int)e.gid_type;
		} else if (ibv_query_gid(ctx, ibport, k, &g.gid)) {
			continue;
		}
		if (memcmp(&g.gid, &zero, sizeof zero) == 0)
			continue;
		gids[ngids++] = g;
	}
	if ((ls = listen_on(listen_spec, where, sizeof where)) < 0)
		return 1;
	if (iwarp && !listen_host[0]) {
		/* The --listen host, if it is one address. */
		const char *c = strrchr(listen_spec, ':');
		size_t n = c ? (size_t)(c - listen_spec) : 0;

		if (n > 2 && listen_spec[0] == '[')
			memcpy(listen_host, listen_spec + 1, n - 2);
		else if (n < sizeof listen_host)
			memcpy(listen_host, listen_spec, n);
		if (!listen_host[0] || !strcmp(listen_host, "0.0.0.0") || !strcmp(listen_host, "::")) {
			fprintf(stderr, "conform-ctl: %s is an iWARP device: give --addr IP, the address its QPs listen on\n", devname);
			return 2;
		}
	}
	printf("conform-ctl: control protocol %s on %s for %s (%s, port %u, path MTU %d)\n", PROTOCOL, where, devname,
	       iwarp ? "iWARP" : "RoCE", ibport, mtu_bytes(port_attr.active_mtu));
	fflush(stdout);
	for (;;) {
		int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
				continue;
			fprintf(stderr, "conform-ctl: accept: %s\n", strerror(errno));
			return 1;
		}
		serve(c);
	}
}
