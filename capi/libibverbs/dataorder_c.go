package main

/*
#include <infiniband/verbs.h>

// ibv_query_qp_data_in_order answers as rdma-core's libibverbs does for a
// provider without query_qp_data_in_order (rxe, siw): 0, no ordering
// guarantee promised for any opcode. The stub's EOPNOTSUPP (95) is neither
// 0 nor a flag: rdma-core's tests (test_qp.test_query_data_in_order) want 0
// or IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG.
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	return 0;
}
*/
import "C"
