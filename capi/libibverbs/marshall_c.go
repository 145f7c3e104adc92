package main

/*
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>

// rdma-core's user-space helpers that need no device (libibverbs/marshall.c,
// sysfs.c), declared in <infiniband/marshall.h> (not installed by Debian's
// libibverbs-dev): the ibv_copy_*_kern conversions between the kernel ABI's
// structs (<rdma/ib_user_verbs.h>, <rdma/ib_user_sa.h>) and libibverbs', and
// ibv_get_sysfs_path. They were generated stubs that did nothing (and
// returned NULL), leaving the destination as it was.

// SR_SAME copies the field f that both structs name alike.
#define SR_SAME(d, s, f) ((d)->f = (s)->f)

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(src->grh.dgid));
	SR_SAME(dst, src, grh.flow_label);
	SR_SAME(dst, src, grh.sgid_index);
	SR_SAME(dst, src, grh.hop_limit);
	SR_SAME(dst, src, grh.traffic_class);
	SR_SAME(dst, src, dlid);
	SR_SAME(dst, src, sl);
	SR_SAME(dst, src, src_path_bits);
	SR_SAME(dst, src, static_rate);
	SR_SAME(dst, src, is_global);
	SR_SAME(dst, src, port_num);
}

// ibv_copy_qp_attr_from_kern leaves qp_state and rate_limit as they were,
// as rdma-core's does (the kernel's qp_state is the one asked for, and it
// has no rate limit).
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	SR_SAME(dst, src, cur_qp_state);
	SR_SAME(dst, src, path_mtu);
	SR_SAME(dst, src, path_mig_state);
	SR_SAME(dst, src, qkey);
	SR_SAME(dst, src, rq_psn);
	SR_SAME(dst, src, sq_psn);
	SR_SAME(dst, src, dest_qp_num);
	SR_SAME(dst, src, qp_access_flags);
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	SR_SAME(dst, src, pkey_index);
	SR_SAME(dst, src, alt_pkey_index);
	SR_SAME(dst, src, en_sqd_async_notify);
	SR_SAME(dst, src, sq_draining);
	SR_SAME(dst, src, max_rd_atomic);
	SR_SAME(dst, src, max_dest_rd_atomic);
	SR_SAME(dst, src, min_rnr_timer);
	SR_SAME(dst, src, port_num);
	SR_SAME(dst, src, timeout);
	SR_SAME(dst, src, retry_cnt);
	SR_SAME(dst, src, rnr_retry);
	SR_SAME(dst, src, alt_port_num);
	SR_SAME(dst, src, alt_timeout);
}

// SR_PATH_FIELDS applies F to each field struct ibv_sa_path_rec and struct
// ib_user_path_rec share by name (the GIDs aside: a union in one, bytes in
// the other). Both keep the wire's byte order in dlid, slid, flow_label and
// pkey: the copies do not swap.
#define SR_PATH_FIELDS(F)                                                                    \
	F(dlid) F(slid) F(raw_traffic) F(flow_label) F(hop_limit) F(traffic_class) F(reversible) \
	F(numb_path) F(pkey) F(sl) F(mtu_selector) F(mtu) F(rate_selector) F(rate)               \
	F(packet_life_time_selector) F(packet_life_time) F(preference)

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(src->dgid));
	memcpy(dst->sgid.raw, src->sgid, sizeof(src->sgid));
#define SR_F(f) SR_SAME(dst, src, f);
	SR_PATH_FIELDS(SR_F)
#undef SR_F
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
#define SR_F(f) SR_SAME(dst, src, f);
	SR_PATH_FIELDS(SR_F)
#undef SR_F
}

// ibv_get_sysfs_path answers as rdma-core's (sysfs.c): "/sys", or the
// SYSFS_PATH of the environment (its first IBV_SYSFS_PATH_MAX bytes, without
// trailing slashes) when the program is not set-user-ID; the first call
// decides. The path need not exist: softrdma's devices have no sysfs
// entries, and rdma-core too returns the path whether or not it is there.
static const char *sr_sysfs_path;
static pthread_once_t sr_sysfs_once = PTHREAD_ONCE_INIT;

static void sr_sysfs_init(void)
{
	const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
	if (!env) {
		sr_sysfs_path = "/sys";
		return;
	}
	char *p = strndup(env, IBV_SYSFS_PATH_MAX);
	if (!p) {
		sr_sysfs_path = "/sys";
		return;
	}
	for (size_t n = strlen(p); n > 0 && p[n - 1] == '/'; n--)
		p[n - 1] = '\0';
	sr_sysfs_path = p;
}

const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sr_sysfs_once, sr_sysfs_init);
	return sr_sysfs_path;
}
*/
import "C"
