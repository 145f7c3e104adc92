/* wiretarget: RC QPs for a test that plays their peer on the wire with
 * packets of its own making, right and wrong (TestWireHostile). It makes
 * QPS QPs on the device's first port, each connected to QP 0x100+I at
 * ::ffff:PEER (responder PSN 1000, requester PSN 5000, path MTU 1024), with
 * four 1024-byte receives posted, and prints
 *     mr ADDR RKEY RKEY2      (a 64 KiB region, all access; RKEY2: the same
 *                              memory registered in another PD)
 *     qp I QPN                (for each QP)
 *     ready
 * then a line per completion, "wc qp=I wr=W status=S opcode=O len=L", as a
 * thread polls them. Commands on stdin: "send I" posts a 16-byte signaled
 * SEND on QP I (wr 9000+I); "state I" prints "state I S"; "byte OFF" prints
 * "byte OFF V" (the region's byte at OFF); end of input exits 0. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define QPS 12

static struct ibv_cq *cq;
static struct ibv_qp *qp[QPS];
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, long a, long b, long c, long d, long e)
{
	pthread_mutex_lock(&out_mu);
	printf(fmt, a, b, c, d, e);
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

static int index_of(uint32_t qpn)
{
	for (int i = 0; i < QPS; i++)
		if (qp[i]->qp_num == qpn)
			return i;
	return -1;
}

static void *poller(void *arg)
{
	(void)arg;
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0) {
			say("poll error %ld\n", n, 0, 0, 0, 0);
			return NULL;
		}
		if (n == 1)
			say("wc qp=%ld wr=%ld status=%ld opcode=%ld len=%ld\n", index_of(wc.qp_num), (long)wc.wr_id, wc.status,
			    wc.opcode, wc.byte_len);
	}
}

int main(int argc, char **argv)
{
	union ibv_gid peer = {0};
	struct in_addr ip;
	if (argc != 2 || inet_pton(AF_INET, argv[1], &ip) != 1)
		return 2;
	peer.raw[10] = peer.raw[11] = 0xff;
	memcpy(&peer.raw[12], &ip, 4);
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!ctx)
		return 2;
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	char *buf = aligned_alloc(4096, 65536);
	if (!pd || !pd2 || !buf)
		return 2;
	memset(buf, 0, 65536);
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 65536, all), *mr2 = ibv_reg_mr(pd2, buf, 65536, all);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!mr || !mr2 || !cq)
		return 2;
	say("mr %ld %ld %ld\n", (long)(uintptr_t)buf, mr->rkey, mr2->rkey, 0, 0);
	for (int i = 0; i < QPS; i++) {
		struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
		qp[i] = ibv_create_qp(pd, &ia);
		if (!qp[i])
			return 2;
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = all};
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			return 2;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = 0x100 + i;
		a.rq_psn = 1000;
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 1;
		a.ah_attr = (struct ibv_ah_attr){.is_global = 1, .port_num = 1, .grh = {.dgid = peer, .sgid_index = 1, .hop_limit = 64}};
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			return 2;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = 5000;
		a.max_rd_atomic = 4;
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
			return 2;
		for (int k = 0; k < 4; k++) {
			struct ibv_sge s = {.addr = (uintptr_t)buf + 16384 + i * 4096 + k * 1024, .length = 1024, .lkey = mr->lkey};
			struct ibv_recv_wr w = {.wr_id = i * 100 + k, .sg_list = &s, .num_sge = 1}, *b;
			if (ibv_post_recv(qp[i], &w, &b))
				return 2;
		}
		say("qp %ld %ld\n", i, qp[i]->qp_num, 0, 0, 0);
	}
	pthread_t th;
	pthread_create(&th, NULL, poller, NULL);
	say("ready\n", 0, 0, 0, 0, 0);
	char line[128];
	while (fgets(line, sizeof(line), stdin)) {
		int i;
		long off;
		if (sscanf(line, "send %d", &i) == 1 && i >= 0 && i < QPS) {
			struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
			struct ibv_send_wr w = {.wr_id = 9000 + i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *b;
			say("posted %ld %ld\n", i, ibv_post_send(qp[i], &w, &b), 0, 0, 0);
		} else if (sscanf(line, "state %d", &i) == 1 && i >= 0 && i < QPS) {
			struct ibv_qp_attr a;
			struct ibv_qp_init_attr ia;
			ibv_query_qp(qp[i], &a, IBV_QP_STATE, &ia);
			say("state %ld %ld\n", i, a.qp_state, 0, 0, 0);
		} else if (sscanf(line, "byte %ld", &off) == 1 && off >= 0 && off < 65536) {
			say("byte %ld %ld\n", off, (unsigned char)buf[off], 0, 0, 0);
		}
	}
	return 0;
}
