/* mcast: ibv_attach_mcast and ibv_detach_mcast on softrdma's RoCE device
 * (argv[1] is its IPv4 address, argv[2] an IPv4 multicast group), and, when
 * a second device is listed, an iWARP one. On the RoCE device: the kernel's
 * errnos (EINVAL for an RC QP, a unicast GID, a detach of a QP not
 * attached; a second attach of the same QP succeeds), then a UD sender on
 * the device sends to the group (QPN 0xFFFFFF, the IPv4-mapped GID, Q_Key
 * 0x01234567): the attached QP receives each message with its payload and
 * the sender as source QP, the QP that attached and detached receives
 * nothing. One line per check ("ok NAME" or "BAD NAME: got X want Y"); exit
 * 1 if any is bad. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define QKEY 0x01234567
#define MSGS 5
#define LEN 64

static int bad;

static void check(const char *name, long got, long want)
{
	if (got == want)
		printf("ok %s\n", name);
	else {
		printf("BAD %s: got %ld want %ld\n", name, got, want);
		bad++;
	}
}

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return NULL;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return NULL;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return NULL;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return NULL;
	return qp;
}

/* poll takes up to want completions from cq within 10 s into wc. */
static int poll(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	int got = 0;
	for (int i = 0; i < 10000 && got < want; i++) {
		int n = ibv_poll_cq(cq, want - got, wc + got);
		if (n < 0)
			return n;
		got += n;
		if (got < want)
			usleep(1000);
	}
	return got;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: mcast DEVICE-IPV4 GROUP-IPV4\n");
		return 2;
	}
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = l && n > 0 ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cqa = pd ? ibv_create_cq(ctx, 32, NULL, NULL, 0) : NULL;
	struct ibv_cq *cqb = pd ? ibv_create_cq(ctx, 32, NULL, NULL, 0) : NULL;
	struct ibv_cq *cqs = pd ? ibv_create_cq(ctx, 32, NULL, NULL, 0) : NULL;
	char *buf = calloc(1, 3 * MSGS * (40 + LEN));
	struct ibv_mr *mr = cqs ? ibv_reg_mr(pd, buf, 3 * MSGS * (40 + LEN), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp *qa = mr ? ud_qp(pd, cqa) : NULL, *qb = qa ? ud_qp(pd, cqb) : NULL, *qs = qb ? ud_qp(pd, cqs) : NULL;
	struct ibv_qp_init_attr rcia = {.send_cq = cqs, .recv_cq = cqs, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *rc = qs ? ibv_create_qp(pd, &rcia) : NULL;
	if (!rc) {
		printf("BAD setup: %s\n", strerror(errno));
		return 1;
	}
	union ibv_gid group = {.raw = {[10] = 0xff, [11] = 0xff}}, unicast;
	inet_pton(AF_INET, argv[2], group.raw + 12);
	ibv_query_gid(ctx, 1, 1, &unicast);

	check("attach an RC QP: EINVAL", ibv_attach_mcast(rc, &group, 0), EINVAL);
	check("attach to a unicast GID: EINVAL", ibv_attach_mcast(qa, &unicast, 0), EINVAL);
	check("detach a QP not attached: EINVAL", ibv_detach_mcast(qa, &group, 0), EINVAL);
	check("attach", ibv_attach_mcast(qa, &group, 0), 0);
	check("attach again: 0", ibv_attach_mcast(qa, &group, 0), 0);
	check("attach the second QP", ibv_attach_mcast(qb, &group, 0), 0);
	check("detach the second QP", ibv_detach_mcast(qb, &group, 0), 0);
	check("detach it again: EINVAL", ibv_detach_mcast(qb, &group, 0), EINVAL);

	/* Receives: qa's in the first third of buf, qb's in the second. */
	for (int i = 0; i < MSGS; i++) {
		for (int q = 0; q < 2; q++) {
			struct ibv_sge sge = {(uintptr_t)buf + (q * MSGS + i) * (40 + LEN), 40 + LEN, mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *badwr;
			if (ibv_post_recv(q ? qb : qa, &wr, &badwr))
				check("post recv", errno, 0);
		}
	}
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = group, .sgid_index = 1, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	check("create the group's AH", ah != NULL, 1);
	char *out = buf + 2 * MSGS * (40 + LEN);
	for (int i = 0; i < MSGS && ah; i++) {
		memset(out + i * LEN, 'a' + i, LEN);
		struct ibv_sge sge = {(uintptr_t)out + i * LEN, LEN, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.ud = {.ah = ah, .remote_qpn = 0xffffff, .remote_qkey = QKEY}}, *badwr;
		if (ibv_post_send(qs, &wr, &badwr))
			check("post send", errno, 0);
	}
	struct ibv_wc wc[MSGS];
	check("sends complete", poll(cqs, wc, MSGS), MSGS);
	int got = poll(cqa, wc, MSGS);
	check("the attached QP receives every message", got, MSGS);
	for (int i = 0; i < got; i++) {
		char want[LEN];
		memset(want, 'a' + (int)wc[i].wr_id, LEN);
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != 40 + LEN || wc[i].src_qp != qs->qp_num ||
		    !(wc[i].wc_flags & IBV_WC_GRH) || memcmp(buf + wc[i].wr_id * (40 + LEN) + 40, want, LEN))
			check("a received message", 0, 1);
	}
	/* Each packet went to both QPs of the group in one engine call: qb,
	 * had it been attached, would have its completions by now. */
	check("the detached QP receives nothing", ibv_poll_cq(cqb, MSGS, wc), 0);

	if (n > 1) {
		/* An iWARP device: siw has no multicast. */
		struct ibv_context *wctx = ibv_open_device(l[1]);
		struct ibv_pd *wpd = wctx ? ibv_alloc_pd(wctx) : NULL;
		struct ibv_cq *wcq = wpd ? ibv_create_cq(wctx, 4, NULL, NULL, 0) : NULL;
		struct ibv_qp_init_attr wia = {.send_cq = wcq, .recv_cq = wcq, .qp_type = IBV_QPT_RC,
					       .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *wqp = wcq ? ibv_create_qp(wpd, &wia) : NULL;
		if (!wqp)
			printf("BAD iwarp setup: %s\n", strerror(errno)), bad++;
		else
			check("attach on iWARP: EOPNOTSUPP", ibv_attach_mcast(wqp, &group, 0), EOPNOTSUPP);
	}
	printf("bad: %d\n", bad);
	return bad != 0;
}
