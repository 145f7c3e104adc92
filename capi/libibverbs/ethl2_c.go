package main

/*
#include <errno.h>
#include <infiniband/verbs.h>

extern void sr_debug(const char *format, ...);

// ibv_resolve_eth_l2_from_gid returns, as rdma-core's does, 0 or a negative
// errno (its own failures are -EINVAL and -EHOSTUNREACH; it resolves the
// MAC through the kernel's neighbour table for a provider to build a RoCE
// address). softrdma's devices need no MAC from the program (the engine
// addresses its peers by IP), so it is not implemented: -EOPNOTSUPP, with
// -EINVAL for a NULL context or address first. A generated stub returned
// +EOPNOTSUPP, which is none of the verb's values.
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	(void)eth_mac;
	(void)vid;
	if (!context || !attr) {
		sr_debug("ibv_resolve_eth_l2_from_gid: context %p, attr %p (EINVAL)", (void *)context, (void *)attr);
		return -EINVAL;
	}
	sr_debug("ibv_resolve_eth_l2_from_gid: not implemented: softrdma's devices address their peers by IP, "
		 "the program needs no MAC (-EOPNOTSUPP)");
	return -EOPNOTSUPP;
}
*/
import "C"
