/* fork: a program that forks before it opens a device. ibv_fork_init and
 * ibv_is_fork_initialized answer as rdma-core does where fork needs no
 * preparation (0, IBV_FORK_UNNEEDED) without starting the library; the child
 * then uses the library (a SEND over an RC QP connected to itself), and so
 * does the parent after it. A child forked after the parent started the
 * library cannot run it (the Go runtime does not survive fork): its verbs fail
 * at once with ENOSYS instead of hanging. One line per check. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

/* loopback sends a message through an RC QP connected to itself and returns
 * 0 if it arrived. */
static int loopback(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	static char buf[2][64];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = mr && cq ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp)
		return 2;
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp->qp_num,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}}};
	rc |= ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};
	rc |= ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		return 3;
	struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.sg_list = &rs, .num_sge = 1}, *brw;
	snprintf(buf[0], 64, "from pid %d", (int)getpid());
	struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bsw;
	if (ibv_post_recv(qp, &rw, &brw) || ibv_post_send(qp, &sw, &bsw))
		return 4;
	int done = 0;
	time_t t0 = time(NULL);
	while (done < 2 && time(NULL) - t0 < 20) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS))
			return 5;
		done += n;
	}
	if (done < 2 || strcmp(buf[0], buf[1]))
		return 6;
	rc = ibv_destroy_qp(qp) | ibv_dereg_mr(mr);
	rc |= ibv_destroy_cq(cq);
	rc |= ibv_dealloc_pd(pd);
	rc |= ibv_close_device(ctx);
	ibv_free_device_list(l);
	return rc ? 7 : 0;
}

static int child_status(pid_t p)
{
	int st;
	if (waitpid(p, &st, 0) != p)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
	printf("ibv_fork_init: %d\n", ibv_fork_init());
	printf("ibv_is_fork_initialized: %s\n", ibv_is_fork_initialized() == IBV_FORK_UNNEEDED ? "unneeded" : "other");
	fflush(stdout);
	pid_t p = fork();
	if (p == 0)
		_exit(loopback());
	printf("child forked before the first verb: %d\n", child_status(p));
	printf("parent after it: %d\n", loopback());
	fflush(stdout);
	p = fork();
	if (p == 0) {
		errno = 0;
		struct ibv_device **l = ibv_get_device_list(NULL);
		_exit(l ? 1 : errno == ENOSYS ? 0 : 2);
	}
	printf("child forked after: ENOSYS at once: %s\n", child_status(p) == 0 ? "yes" : "no");
	return 0;
}
