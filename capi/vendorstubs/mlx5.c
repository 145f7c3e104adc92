/* libmlx5.so.1 for softrdma's lib/: Debian's perftest links libmlx5.so.1 (and
 * libefa.so.1), whose real versions register with libibverbs through
 * IBVERBS_PRIVATE_34, which softrdma's libibverbs does not export. These are
 * the mlx5dv_* functions perftest and UCX's uct_ib module import, failing as
 * for a device that is not an mlx5: perftest picks its vendor path from the
 * device's vendor id (0xFFFFFF here, rxe's) and UCX from mlx5dv_is_supported,
 * and neither calls the others then. Without one of them the dynamic loader
 * refuses the whole program (perftest) or module (UCX: no verbs transports). */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

bool mlx5dv_is_supported(void *device) { return false; }
int mlx5dv_query_device(void *ctx, void *attrs) { return EOPNOTSUPP; }
void *mlx5dv_open_device(void *device, void *attr) { errno = EOPNOTSUPP; return NULL; }
void *mlx5dv_create_qp(void *ctx, void *attr, void *mlx5_attr) { errno = EOPNOTSUPP; return NULL; }
void *mlx5dv_qp_ex_from_ibv_qp_ex(void *qp) { return NULL; }
void *mlx5dv_create_mkey(void *attr) { errno = EOPNOTSUPP; return NULL; }
int mlx5dv_destroy_mkey(void *mkey) { return EOPNOTSUPP; }
int mlx5dv_devx_general_cmd(void *ctx, const void *in, size_t inlen, void *out, size_t outlen) { return EOPNOTSUPP; }
int mlx5dv_crypto_login(void *ctx, void *attr) { return EOPNOTSUPP; }
void *mlx5dv_dek_create(void *ctx, void *attr) { errno = EOPNOTSUPP; return NULL; }
int mlx5dv_dek_destroy(void *dek) { return EOPNOTSUPP; }
void *mlx5dv_create_cq(void *ctx, void *cq_attr, void *mlx5_cq_attr) { errno = EOPNOTSUPP; return NULL; }
int mlx5dv_init_obj(void *obj, uint64_t obj_type) { return EOPNOTSUPP; }
void *mlx5dv_devx_alloc_uar(void *ctx, uint32_t flags) { errno = EOPNOTSUPP; return NULL; }
void mlx5dv_devx_free_uar(void *uar) {}
void *mlx5dv_devx_obj_create(void *ctx, const void *in, size_t inlen, void *out, size_t outlen) { errno = EOPNOTSUPP; return NULL; }
int mlx5dv_devx_obj_destroy(void *obj) { return EOPNOTSUPP; }
int mlx5dv_devx_obj_modify(void *obj, const void *in, size_t inlen, void *out, size_t outlen) { return EOPNOTSUPP; }
int mlx5dv_devx_obj_query(void *obj, const void *in, size_t inlen, void *out, size_t outlen) { return EOPNOTSUPP; }
void *mlx5dv_devx_umem_reg(void *ctx, void *addr, size_t size, uint32_t access) { errno = EOPNOTSUPP; return NULL; }
int mlx5dv_devx_umem_dereg(void *umem) { return EOPNOTSUPP; }
int mlx5dv_devx_qp_modify(void *qp, const void *in, size_t inlen, void *out, size_t outlen) { return EOPNOTSUPP; }
int mlx5dv_devx_qp_query(void *qp, const void *in, size_t inlen, void *out, size_t outlen) { return EOPNOTSUPP; }
void *mlx5dv_devx_create_event_channel(void *ctx, int flags) { errno = EOPNOTSUPP; return NULL; }
void mlx5dv_devx_destroy_event_channel(void *ch) {}
ssize_t mlx5dv_devx_get_event(void *ch, void *data, size_t len) { errno = EOPNOTSUPP; return -1; }
int mlx5dv_devx_subscribe_devx_event(void *ch, void *obj, uint16_t events_sz, uint16_t events_num[], uint64_t cookie) { return EOPNOTSUPP; }
