/* rc_connect, shared by the C test programs: moves an RC QP from RESET through
 * INIT and RTR to RTS, connected to QP dest at gid (port 1, source GID index 1,
 * IBV_MTU_1024), with the attributes that differ between the tests in p. It
 * returns 0, or the OR of the failed ibv_modify_qp results. */
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

struct rc_params {
	unsigned int access;   /* INIT: qp_access_flags */
	uint32_t psn;          /* RTR rq_psn and RTS sq_psn */
	uint8_t min_rnr_timer; /* RTR */
	uint8_t timeout, retry_cnt, rnr_retry; /* RTS */
};

static int rc_connect(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid, struct rc_params p)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = p.access};
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = p.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = p.min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	rc |= ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = p.timeout;
	a.retry_cnt = p.retry_cnt;
	a.rnr_retry = p.rnr_retry;
	a.sq_psn = p.psn;
	a.max_rd_atomic = 1;
	rc |= ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	return rc;
}
