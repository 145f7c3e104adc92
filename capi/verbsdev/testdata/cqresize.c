/* cqresize: ibv_resize_cq as on rxe. A size out of 1..max_cqe is EINVAL; a
 * CQ takes rxe's depth, cqe+1 rounded up to a power of two less one, which
 * cq->cqe reports; it grows and shrinks empty, and with completions waiting
 * (six flushed receives, there when ibv_modify_qp to ERR returns) it shrinks
 * to no fewer than those (below: EINVAL, the CQ as it was) and keeps them in
 * order across a shrink and a grow. On iWARP (siw has no resize_cq) it is
 * EOPNOTSUPP. One line per check (checks.h). */
#include <stdint.h>
#include <infiniband/verbs.h>
#include "checks.h"

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0), *scq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_device_attr da;
	if (!pd || !cq || !scq || ibv_query_device(ctx, &da))
		return 1;
	if (l[0]->transport_type == IBV_TRANSPORT_IWARP) {
		RC("resize on iwarp", EOPNOTSUPP, ibv_resize_cq(cq, 8));
		expect("cqe after the refusal", cq->cqe, 4);
		printf("checks: %d, bad: %d\n", total, bad);
		return bad != 0;
	}
	RC("resize 0", EINVAL, ibv_resize_cq(cq, 0));
	RC("resize -1", EINVAL, ibv_resize_cq(cq, -1));
	RC("resize max_cqe+1", EINVAL, ibv_resize_cq(cq, da.max_cqe + 1));
	expect("cqe after the refusals", cq->cqe, 7); /* created with 4: rxe's 7 */
	const struct {
		int cqe, want;
	} sizes[] = {{1, 1}, {7, 7}, {8, 15}, {5, 7}, {da.max_cqe, da.max_cqe}, {2, 3}};
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char name[64];
		snprintf(name, sizeof(name), "resize %d", sizes[i].cqe);
		RC(name, 0, ibv_resize_cq(cq, sizes[i].cqe));
		expect(name, cq->cqe, sizes[i].want);
	}

	/* Six receives flushed into a CQ of 7. */
	RC("resize 7", 0, ibv_resize_cq(cq, 7));
	struct ibv_qp_init_attr qa = {.send_cq = scq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 1, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return 1;
	for (uint64_t i = 0; i < 6; i++) {
		struct ibv_recv_wr w = {.wr_id = i}, *badw;
		if (ibv_post_recv(qp, &w, &badw))
			return 1;
	}
	a.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return 1;
	RC("resize 5 below the 6 waiting", EINVAL, ibv_resize_cq(cq, 5));
	RC("resize 1 below the 6 waiting", EINVAL, ibv_resize_cq(cq, 1));
	expect("cqe after the refusals", cq->cqe, 7);
	RC("resize 6, what waits", 0, ibv_resize_cq(cq, 6));
	expect("resize 6", cq->cqe, 7);
	RC("resize 100 with 6 waiting", 0, ibv_resize_cq(cq, 100));
	expect("resize 100", cq->cqe, 127);
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(cq, 8, wc);
	expect("completions kept", n, 6);
	int order = 1;
	for (int i = 0; i < n; i++)
		order &= wc[i].wr_id == (uint64_t)i && wc[i].status == IBV_WC_WR_FLUSH_ERR;
	expect("in order, flushed", order, 1);
	RC("resize 1 once polled", 0, ibv_resize_cq(cq, 1));
	expect("resize 1", cq->cqe, 1);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_destroy_cq(scq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("checks: %d, bad: %d\n", total, bad);
	return bad != 0;
}
