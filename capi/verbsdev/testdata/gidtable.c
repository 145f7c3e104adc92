/* gidtable: ibv_query_gid_table on the first device: with room for every
 * entry it returns their number, each entry valid (non-zero GID, its index
 * and port, the GID ibv_query_gid gives at that index); with room for one
 * fewer it fails with -EINVAL. Prints "entries N" and "ok", or what is
 * wrong. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!ctx) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	struct ibv_gid_entry e[64];
	ssize_t n = ibv_query_gid_table(ctx, e, 64, 0);
	printf("entries %zd\n", n);
	if (n < 1 || n > 64) {
		printf("BAD count\n");
		return 1;
	}
	for (ssize_t i = 0; i < n; i++) {
		union ibv_gid g, zero = {0};
		if (e[i].port_num != 1 || ibv_query_gid(ctx, 1, e[i].gid_index, &g) ||
		    !memcmp(&g, &zero, sizeof(g)) || memcmp(&g, &e[i].gid, sizeof(g))) {
			printf("BAD entry %zd (index %u port %u)\n", i, e[i].gid_index, e[i].port_num);
			return 1;
		}
	}
	ssize_t small = ibv_query_gid_table(ctx, e, n - 1, 0);
	if (small != -EINVAL) {
		printf("BAD room for %zd of %zd: %zd, want -EINVAL\n", n - 1, n, small);
		return 1;
	}
	printf("ok\n");
	return 0;
}
