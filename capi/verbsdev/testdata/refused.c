/* refused: three verbs the library refuses, each for a reason of its own, for
 * TestDebugLog to find SOFTRDMA_DEBUG's line naming the verb and the reason:
 * ibv_reg_dmabuf_mr (not implemented: EOPNOTSUPP), ibv_create_cq with 0 entries
 * (EINVAL), ibv_reg_mr of length 0 (EINVAL). Prints "errno VERB N" for each. */
#include <errno.h>
#include <stdio.h>
#include <infiniband/verbs.h>

int main(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = l && n > 0 ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	if (!pd || !cq) {
		printf("setup failed\n");
		return 1;
	}
	errno = 0;
	printf("errno ibv_reg_dmabuf_mr %d\n", ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE) ? 0 : errno);
	errno = 0;
	printf("errno ibv_create_cq %d\n", ibv_create_cq(ctx, 0, NULL, NULL, 0) ? 0 : errno);
	static char buf[64];
	errno = 0;
	printf("errno ibv_reg_mr %d\n", ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE) ? 0 : errno);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	return 0;
}
