package main

/*
#include <infiniband/verbs.h>

// ibv_get_pkey_index returns the index of pkey in port_num's P_Key table, as
// rdma-core's libibverbs finds it (verbs.c: ibv_query_pkey from index 0 up
// until it finds pkey, or fails past the table: that failure is the answer,
// a negative value). The generated stub returned EOPNOTSUPP, 95, an index a
// caller would use.
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	__be16 pkey_i;
	for (int i = 0;; i++) {
		int ret = ibv_query_pkey(context, port_num, i, &pkey_i);
		if (ret < 0)
			return ret;
		if (ret > 0)
			return -ret;
		if (pkey == pkey_i)
			return i;
	}
}
*/
import "C"
