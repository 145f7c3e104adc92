/* rereg: ibv_rereg_mr as rdma-core returns it (libibverbs/verbs.c,
 * man ibv_rereg_mr): 0, or an enum ibv_rereg_mr_err_code with errno set —
 * IBV_REREG_MR_ERR_INPUT (-1, EINVAL) for the input libibverbs refuses itself,
 * IBV_REREG_MR_ERR_CMD (-4) for what the kernel refuses (no flags: EINVAL;
 * reg_mr's rules for the new registration: remote write without local write
 * EINVAL, memory that is not mapped EFAULT). Then the region moves to other
 * access flags, another PD (the old PD deallocates, the new one is busy) and
 * other memory, keeping its L_Key and R_Key as rxe does (a peer holding the
 * R_Key goes on using it: rdma-core's tests/test_mr.py rereg cases rely on
 * it), and an RDMA WRITE of a QP connected to itself on the new PD goes
 * through those keys into the new memory; a refused call left the region as
 * it was. One line per check (checks.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "checks.h"
#include "rcconnect.h"

/* RR(name, want, werr, call): ibv_rereg_mr's return value, and its errno when
 * it fails. */
#define RR(name, want, werr, call)                                                                \
	do {                                                                                      \
		mark(name, (want) != 0);                                                          \
		errno = 0;                                                                        \
		long r_ = (call);                                                                 \
		expect(name, r_, want);                                                           \
		if (want)                                                                         \
			expect(name " errno", errno, werr);                                       \
	} while (0)

static char a[4096], b[8192];

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd1 = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd1 || !pd2 || !cq)
		return 1;
	struct ibv_mr *mr = ibv_reg_mr(pd1, a, sizeof(a), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return 1;
	const uint32_t lkey = mr->lkey, rkey = mr->rkey;
	const int T = IBV_REREG_MR_CHANGE_TRANSLATION, P = IBV_REREG_MR_CHANGE_PD, A = IBV_REREG_MR_CHANGE_ACCESS;

	RR("unknown flag", IBV_REREG_MR_ERR_INPUT, EINVAL, ibv_rereg_mr(mr, 8, NULL, NULL, 0, 0));
	RR("translation without a length", IBV_REREG_MR_ERR_INPUT, EINVAL, ibv_rereg_mr(mr, T, NULL, b, 0, 0));
	RR("translation without an address", IBV_REREG_MR_ERR_INPUT, EINVAL, ibv_rereg_mr(mr, T, NULL, NULL, 64, 0));
	RR("access without CHANGE_ACCESS", IBV_REREG_MR_ERR_INPUT, EINVAL,
	   ibv_rereg_mr(mr, P, pd2, NULL, 0, IBV_ACCESS_LOCAL_WRITE));
	RR("NULL mr", IBV_REREG_MR_ERR_INPUT, EINVAL, ibv_rereg_mr(NULL, A, NULL, NULL, 0, 0));
	RR("CHANGE_PD with a NULL pd", IBV_REREG_MR_ERR_INPUT, EINVAL, ibv_rereg_mr(mr, P, NULL, NULL, 0, 0));
	RR("no flags", IBV_REREG_MR_ERR_CMD, EINVAL, ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0));
	RR("remote write without local write", IBV_REREG_MR_ERR_CMD, EINVAL,
	   ibv_rereg_mr(mr, A, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE));
	RR("memory not mapped", IBV_REREG_MR_ERR_CMD, EFAULT, ibv_rereg_mr(mr, T, NULL, (void *)4096, 4096, 0));
	expect("refused calls left the region", mr->addr == a && mr->length == sizeof(a) && mr->pd == pd1, 1);

	RR("change access", 0, 0, ibv_rereg_mr(mr, A, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	RR("change pd", 0, 0, ibv_rereg_mr(mr, P, pd2, NULL, 0, 0));
	expect("the region's pd", mr->pd == pd2, 1);
	RC("dealloc the old pd", 0, ibv_dealloc_pd(pd1));
	RC("dealloc the new pd", EBUSY, ibv_dealloc_pd(pd2));
	RR("change translation", 0, 0, ibv_rereg_mr(mr, T, NULL, b, sizeof(b), 0));
	expect("the region's memory", mr->addr == b && mr->length == sizeof(b), 1);
	expect("the region's keys stayed", mr->lkey == lkey && mr->rkey == rkey, 1);

	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd2, &ia);
	if (!qp)
		return 1;
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	RC("connect to itself", 0, rc_connect(qp, qp->qp_num, gid, (struct rc_params){.access = IBV_ACCESS_REMOTE_WRITE,
		.psn = 3, .min_rnr_timer = 12, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7}));
	strcpy(b, "through the new registration");
	struct ibv_sge s = {.addr = (uintptr_t)b, .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = (uintptr_t)b + 4096, .rkey = rkey}}, *bad_wr;
	RC("post write", 0, ibv_post_send(qp, &w, &bad_wr));
	struct ibv_wc wc;
	expect("write completion", poll1(cq, &wc), IBV_WC_SUCCESS);
	expect("written", strcmp(b + 4096, "through the new registration"), 0);

	RC("destroy qp", 0, ibv_destroy_qp(qp));
	RC("dereg", 0, ibv_dereg_mr(mr));
	RC("dealloc pd", 0, ibv_dealloc_pd(pd2));
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("checks: %d, bad: %d\n", total, bad);
	return 0;
}
