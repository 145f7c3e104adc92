package main

/*
#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <infiniband/verbs.h>

// _ibv_query_gid_table (ibv_query_gid_table) fills entries with the valid
// entries of the GID table of every port, as the kernel's
// IB_METHOD_QUERY_GID_TABLE does, and returns their number, or a negative
// errno: -EINVAL for flags, an entry_size below struct ibv_gid_entry's, or
// fewer max_entries than valid entries (the kernel's answer to a buffer too
// small). The entries are _ibv_query_gid_ex's (verbs_c.go), written
// entry_size apart. Before, a generated stub returned EOPNOTSUPP as a
// positive count: a caller read 95 entries of garbage (pyverbs'
// query_gid_table in rdma-core's test_device).
ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max_entries,
			     uint32_t flags, size_t entry_size)
{
	if (!ctx || flags || entry_size < sizeof(struct ibv_gid_entry) || (max_entries && !entries))
		return -EINVAL;
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		return -errno;
	size_t n = 0;
	for (uint32_t port = 1; port <= da.phys_port_cnt; port++) {
		struct ibv_port_attr pa;
		if (ibv_query_port(ctx, port, &pa))
			return -errno;
		for (int i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry e;
			int rc = _ibv_query_gid_ex(ctx, port, i, &e, 0, sizeof(e));
			if (rc == ENODATA)
				continue;
			if (rc)
				return -rc;
			if (n == max_entries)
				return -EINVAL;
			memcpy((char *)entries + n * entry_size, &e, sizeof(e));
			n++;
		}
	}
	return n;
}
*/
import "C"
