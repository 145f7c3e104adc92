/* srqresize: ibv_modify_srq with IBV_SRQ_MAX_WR on softrdma's RoCE device,
 * which claims IBV_DEVICE_SRQ_RESIZE as rxe does: what rxe refuses is EINVAL,
 * a resize keeps the posted WRs, and ibv_query_srq reports the new depth. One
 * line per check ("ok NAME" or "BAD NAME: got X want Y"); exit 1 if any is bad. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

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

int main(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1) {
		printf("BAD no devices\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_device_attr da;
	if (!ctx || ibv_query_device(ctx, &da)) {
		printf("BAD open/query: %s\n", strerror(errno));
		return 1;
	}
	check("device_cap_flags has SRQ_RESIZE", !!(da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE), 1);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_srq_init_attr si = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = mr ? ibv_create_srq(pd, &si) : NULL;
	if (!srq) {
		printf("BAD setup: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *badwr;
	int posted = 0;
	for (int i = 0; i < 3; i++)
		posted += !ibv_post_srq_recv(srq, &wr, &badwr);
	check("3 WRs posted", posted, 3);

	struct ibv_srq_attr a = {.max_wr = 2};
	check("resize below the WRs posted", ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = 0;
	check("resize to 0", ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = da.max_srq_wr + 1;
	check("resize beyond max_srq_wr", ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = 8;
	check("grow to 8", ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
	struct ibv_srq_attr q;
	check("query_srq", ibv_query_srq(srq, &q), 0);
	check("query_srq max_wr", q.max_wr, 8);
	posted = 0;
	for (int i = 0; i < 5; i++)
		posted += !ibv_post_srq_recv(srq, &wr, &badwr);
	check("5 more WRs posted (8 in all)", posted, 5);
	check("a 9th: full", ibv_post_srq_recv(srq, &wr, &badwr), ENOMEM);
	a.srq_limit = 9;
	check("limit above the depth", ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL);
	a.max_wr = 16;
	a.srq_limit = 10;
	check("grow to 16 and arm 10 at once", ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
	ibv_query_srq(srq, &q);
	check("query_srq max_wr after", q.max_wr, 16);
	check("query_srq srq_limit after", q.srq_limit, 10);
	check("destroy_srq", ibv_destroy_srq(srq), 0);
	check("dereg_mr", ibv_dereg_mr(mr), 0);
	check("dealloc_pd", ibv_dealloc_pd(pd), 0);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("bad: %d\n", bad);
	return bad ? 1 : 0;
}
