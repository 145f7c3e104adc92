/* libefa.so.1 for softrdma's lib/: see mlx5.c. The efadv_* functions Debian's
 * perftest and libfabric (libfabric.so.1 links libefa.so.1 for its efa
 * provider) import, failing as for a device that is not an EFA. Without one of
 * them the dynamic loader refuses the whole program (fi_info, fi_pingpong), or
 * the module (pyverbs' efa provider, which rdma-core's tests import). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

void *efadv_create_driver_qp(void *pd, void *attr, uint32_t driver_qp_type) { errno = EOPNOTSUPP; return NULL; }
int efadv_query_device(void *ctx, void *attr, uint32_t inlen) { return EOPNOTSUPP; }
void *efadv_create_qp_ex(void *ctx, void *attr, void *efa_attr, uint32_t inlen) { errno = EOPNOTSUPP; return NULL; }
int efadv_query_ah(void *ah, void *attr, uint32_t inlen) { return EOPNOTSUPP; }
void *efadv_create_cq(void *ctx, void *attr_ex, void *efa_attr, uint32_t inlen) { errno = EOPNOTSUPP; return NULL; }
void *efadv_cq_from_ibv_cq_ex(void *cq) { return NULL; }
