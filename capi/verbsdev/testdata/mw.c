/* mw: memory windows between two processes. The owner (no address argument)
 * registers a region with IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND only,
 * binds a window to its middle kilobyte with remote read and write, and sends
 * the window's R_Key to the peer (the client, given the owner's address),
 * which WRITEs a pattern through it and READs it back. The owner then finds
 * the pattern in the window's range and nothing outside it, and invalidates
 * the window; the peer's next WRITE completes with IBV_WC_REM_ACCESS_ERR and
 * leaves the memory as it was. -t picks how:
 *   1   a type 1 window: ibv_bind_mw, unbound by a zero-length ibv_bind_mw;
 *   2   a type 2 window: a BIND_MW work request (ibv_post_send), invalidated
 *       by the peer's SEND_WITH_INV (the owner's receive reports the key);
 *   2x  a type 2 window on an extended QP: ibv_wr_bind_mw, invalidated by
 *       ibv_wr_local_inv;
 *   2xs the same, invalidated by the peer's ibv_wr_send_inv (extended QPs at
 *       both ends).
 * Usage: mw -d DEV -p PORT -t MODE [OWNER-ADDRESS]. One line per check
 * (checks.h: "ok NAME" or "BAD NAME"), then "done N checks" or a failure. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "checks.h"
#include "rcconnect.h"

#define WIN_OFF 1024
#define WIN_LEN 1024

static char buf[4096];

struct hello {
	uint32_t qpn;
	union ibv_gid gid;
	uint32_t rkey; /* the owner's window */
	uint64_t addr;
};

static void die(const char *what)
{
	printf("BAD %s: errno %d\n", what, errno);
	exit(1);
}

static void xfer(int fd, void *p, size_t n, int out)
{
	for (size_t d = 0; d < n;) {
		ssize_t r = out ? write(fd, (char *)p + d, n - d) : read(fd, (char *)p + d, n - d);
		if (r <= 0)
			die(out ? "write to the peer" : "read from the peer");
		d += (size_t)r;
	}
}

/* sync sends one byte and waits for the peer's. */
static void sync_peer(int fd)
{
	char c = 's';
	xfer(fd, &c, 1, 1);
	xfer(fd, &c, 1, 0);
}

/* one waits (bounded) for one completion of cq. */
static struct ibv_wc one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long i = 0; i < 200000000L; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1)
			return wc;
		if (i > 1000)
			usleep(50);
	}
	die("no completion");
	return wc;
}

static void want_wc(const char *name, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op, enum ibv_wc_status st)
{
	struct ibv_wc wc = one(cq);
	char n[96];
	snprintf(n, sizeof(n), "%s wr_id", name);
	expect(n, (long)wc.wr_id, (long)wr_id);
	snprintf(n, sizeof(n), "%s status", name);
	expect(n, wc.status, st);
	if (st == IBV_WC_SUCCESS) {
		snprintf(n, sizeof(n), "%s opcode", name);
		expect(n, wc.opcode, op);
	}
}

static int post_rdma(struct ibv_qp *qp, struct ibv_mr *mr, enum ibv_wr_opcode op, uint64_t wr_id, uint64_t addr, uint32_t rkey)
{
	struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = WIN_LEN, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sg, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *mode = "2", *owner_addr = NULL;
	int port = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-d") && i + 1 < argc)
			dev = argv[++i];
		else if (!strcmp(argv[i], "-p") && i + 1 < argc)
			port = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-t") && i + 1 < argc)
			mode = argv[++i];
		else
			owner_addr = argv[i];
	}
	int owner = owner_addr == NULL;
	int type = mode[0] == '1' ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2, ext = !strncmp(mode, "2x", 2);
	int peer_inv = !strcmp(mode, "2") || !strcmp(mode, "2xs"); /* the peer's SEND_WITH_INV invalidates */

	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; l && l[i]; i++)
		if (!dev || !strcmp(ibv_get_device_name(l[i]), dev))
			ctx = ibv_open_device(l[i]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd or cq");
	struct ibv_qp *qp;
	struct ibv_qp_init_attr_ex ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD};
	if (ext) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
				    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
		qp = ibv_create_qp_ex(ctx, &ia);
	} else {
		struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = ia.cap};
		qp = ibv_create_qp(pd, &a);
	}
	if (!qp)
		die("create qp");
	unsigned int mr_access = owner ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND : IBV_ACCESS_LOCAL_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), (int)mr_access);
	if (!mr)
		die("ibv_reg_mr");

	/* Out of band: the owner listens, the peer connects. */
	int fd;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (owner) {
		int ls = socket(AF_INET, SOCK_STREAM, 0), one_ = 1;
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one_, sizeof(one_));
		if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 1))
			die("listen");
		fd = accept(ls, NULL, NULL);
		close(ls);
	} else {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		inet_pton(AF_INET, owner_addr, &sa.sin_addr);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			die("connect");
	}
	if (fd < 0)
		die("accept");

	struct hello me = {.qpn = qp->qp_num}, peer;
	if (ibv_query_gid(ctx, 1, 1, &me.gid))
		die("ibv_query_gid");
	struct ibv_mw *mw = NULL;
	if (owner) {
		mw = ibv_alloc_mw(pd, type);
		if (!mw)
			die("ibv_alloc_mw");
		expect("alloc mw type", mw->type, type);
		expect("alloc mw pd", mw->pd == pd, 1);
	}
	/* The owner's QP takes remote reads and writes; the peer's none. */
	struct rc_params p = {.access = owner ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0, .psn = 7,
		.min_rnr_timer = 12, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7};
	xfer(fd, &me, sizeof(me), 1);
	xfer(fd, &peer, sizeof(peer), 0);
	if (rc_connect(qp, peer.qpn, peer.gid, p))
		die("rc_connect");
	sync_peer(fd);

	if (owner) {
		uint32_t rkey = 0, before = mw->rkey;
		unsigned int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		struct ibv_mw_bind_info bi = {.mr = mr, .addr = (uintptr_t)buf + WIN_OFF, .length = WIN_LEN, .mw_access_flags = access};
		if (type == IBV_MW_TYPE_1) {
			struct ibv_mw_bind b = {.wr_id = 1, .send_flags = IBV_SEND_SIGNALED, .bind_info = bi};
			RC("ibv_bind_mw", 0, ibv_bind_mw(qp, mw, &b));
			rkey = mw->rkey;
			expect("ibv_bind_mw gave the next key", rkey, ibv_inc_rkey(before));
		} else if (ext) {
			struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
			rkey = ibv_inc_rkey(mw->rkey);
			ibv_wr_start(x);
			x->wr_id = 1;
			x->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_bind_mw(x, mw, rkey, &bi);
			RC("ibv_wr_bind_mw", 0, ibv_wr_complete(x));
		} else {
			/* IBV_ACCESS_LOCAL_WRITE means nothing in a window; rxe keeps it
			 * (pyverbs' MW tests ask for it). */
			rkey = ibv_inc_rkey(mw->rkey);
			bi.mw_access_flags |= IBV_ACCESS_LOCAL_WRITE;
			struct ibv_send_wr wr = {.wr_id = 1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
			wr.bind_mw.mw = mw;
			wr.bind_mw.rkey = rkey;
			wr.bind_mw.bind_info = bi;
			RC("ibv_post_send BIND_MW", 0, ibv_post_send(qp, &wr, &bad));
		}
		want_wc("bind", cq, 1, IBV_WC_BIND_MW, IBV_WC_SUCCESS);
		if (peer_inv) {
			/* The peer's SEND_WITH_INV needs a receive. */
			struct ibv_sge sg = {.addr = (uintptr_t)buf + 3072, .length = 64, .lkey = mr->lkey};
			struct ibv_recv_wr rw = {.wr_id = 9, .sg_list = &sg, .num_sge = 1}, *rbad;
			RC("post recv", 0, ibv_post_recv(qp, &rw, &rbad));
		}
		struct hello w = {.rkey = rkey, .addr = (uintptr_t)buf + WIN_OFF};
		xfer(fd, &w, sizeof(w), 1);
		sync_peer(fd); /* the peer wrote and read */
		int inside = 1, outside = 1;
		for (int i = 0; i < (int)sizeof(buf); i++) {
			if (i >= WIN_OFF && i < WIN_OFF + WIN_LEN)
				inside &= buf[i] == (char)(i - WIN_OFF + 1);
			else if (i < 3072)
				outside &= buf[i] == 0;
		}
		expect("the peer's WRITE landed in the window", inside, 1);
		expect("nothing outside the window changed", outside, 1);
		if (type == IBV_MW_TYPE_1) {
			struct ibv_mw_bind b = {.wr_id = 2, .send_flags = IBV_SEND_SIGNALED, .bind_info = {.mr = mr}};
			RC("ibv_bind_mw length 0 (unbind)", 0, ibv_bind_mw(qp, mw, &b));
			want_wc("unbind", cq, 2, IBV_WC_BIND_MW, IBV_WC_SUCCESS);
		} else if (!peer_inv) {
			struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
			ibv_wr_start(x);
			x->wr_id = 2;
			x->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_local_inv(x, rkey);
			RC("ibv_wr_local_inv", 0, ibv_wr_complete(x));
			want_wc("local invalidate", cq, 2, IBV_WC_LOCAL_INV, IBV_WC_SUCCESS);
		} else {
			sync_peer(fd); /* the peer sent SEND_WITH_INV */
			struct ibv_wc wc = one(cq);
			expect("receive of SEND_WITH_INV", wc.status, IBV_WC_SUCCESS);
			expect("receive opcode", wc.opcode, IBV_WC_RECV);
			expect("receive flags WITH_INV", !!(wc.wc_flags & IBV_WC_WITH_INV), 1);
			expect("receive invalidated key", wc.invalidated_rkey, rkey);
		}
		sync_peer(fd); /* invalidated */
		sync_peer(fd); /* the peer's WRITE failed */
		int kept = 1;
		for (int i = 0; i < WIN_LEN; i++)
			kept &= buf[WIN_OFF + i] == (char)(i + 1);
		expect("the WRITE after the invalidation changed nothing", kept, 1);
		RC("ibv_dealloc_mw", 0, ibv_dealloc_mw(mw));
	} else {
		struct hello w;
		xfer(fd, &w, sizeof(w), 0);
		for (int i = 0; i < WIN_LEN; i++)
			buf[i] = (char)(i + 1);
		RC("WRITE through the window", 0, post_rdma(qp, mr, IBV_WR_RDMA_WRITE, 10, w.addr, w.rkey));
		want_wc("WRITE", cq, 10, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS);
		memset(buf, 0, WIN_LEN);
		RC("READ through the window", 0, post_rdma(qp, mr, IBV_WR_RDMA_READ, 11, w.addr, w.rkey));
		want_wc("READ", cq, 11, IBV_WC_RDMA_READ, IBV_WC_SUCCESS);
		int same = 1;
		for (int i = 0; i < WIN_LEN; i++)
			same &= buf[i] == (char)(i + 1);
		expect("READ gave what was written", same, 1);
		sync_peer(fd);
		if (peer_inv) {
			if (ext) {
				struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
				ibv_wr_start(x);
				x->wr_id = 12;
				x->wr_flags = IBV_SEND_SIGNALED;
				ibv_wr_send_inv(x, w.rkey);
				RC("ibv_wr_send_inv", 0, ibv_wr_complete(x));
			} else {
				struct ibv_send_wr wr = {.wr_id = 12, .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED}, *bad;
				wr.invalidate_rkey = w.rkey;
				RC("SEND_WITH_INV", 0, ibv_post_send(qp, &wr, &bad));
			}
			want_wc("SEND_WITH_INV", cq, 12, IBV_WC_SEND, IBV_WC_SUCCESS);
			sync_peer(fd);
		}
		sync_peer(fd); /* invalidated */
		memset(buf, 0x5a, WIN_LEN);
		RC("WRITE after the invalidation posts", 0, post_rdma(qp, mr, IBV_WR_RDMA_WRITE, 13, w.addr, w.rkey));
		want_wc("WRITE after the invalidation", cq, 13, IBV_WC_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR);
		sync_peer(fd);
	}
	close(fd);
	printf("done %d checks, %d bad\n", total, bad);
	return bad != 0;
}
