/* forkseed: what a forking server (qperf --listen) does: the parent, which
 * has made no verb call, forks one child after another, and each child opens
 * the first device and makes a QP and a memory region. Each child prints
 * "qpn LKEY RKEY"; the test wants them to differ, as two processes on one
 * kernel device get different ones. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>

static int child(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0]) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	if (!cq) {
		perror("open/pd/cq");
		return 1;
	}
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!qp || !mr) {
		perror("qp/mr");
		return 1;
	}
	printf("%u %u %u\n", qp->qp_num, mr->lkey, mr->rkey);
	fflush(stdout);
	ibv_dereg_mr(mr);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}

int main(void)
{
	for (int i = 0; i < 2; i++) {
		pid_t p = fork();
		if (p < 0) {
			perror("fork");
			return 1;
		}
		if (p == 0)
			exit(child());
		int st;
		if (waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "child %d failed (status 0x%x)\n", i, st);
			return 1;
		}
	}
	return 0;
}
