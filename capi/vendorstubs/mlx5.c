/* libmlx5.so.1 for softrdma's lib/: Debian's perftest links libmlx5.so.1 (and
 * libefa.so.1), whose real versions register with libibverbs through
 * IBVERBS_PRIVATE_34, which softrdma's libibverbs does not export. These are
 * the mlx5dv_* functions perftest (and UCX's probe) import, failing as for a
 * device that is not an mlx5: perftest picks its vendor path from the device's
 * vendor id (0xFFFFFF here, rxe's) and never calls them. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

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
