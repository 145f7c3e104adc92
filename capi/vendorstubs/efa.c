/* libefa.so.1 for softrdma's lib/: see mlx5.c. The efadv_* functions Debian's
 * perftest imports, failing as for a device that is not an EFA. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

int efadv_query_device(void *ctx, void *attr, uint32_t inlen) { return EOPNOTSUPP; }
void *efadv_create_qp_ex(void *ctx, void *attr, void *efa_attr, uint32_t inlen) { errno = EOPNOTSUPP; return NULL; }
