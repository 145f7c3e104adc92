/*
 * The private interface between librdmacm.so.1 (capi/librdmacm, thin C) and
 * the Go engine in libibverbs.so.1 (cm.go): one Go runtime per process, so the
 * rdma_cm engine lives in libibverbs.so.1 and librdmacm.so.1 forwards to it.
 * The functions are exported from libibverbs.so.1 in the version node
 * SOFTRDMA_CM_PRIVATE (libibverbs.map), which no program links against.
 *
 * Handles (uintptr_t) are the Go side's cgo handles of channels and IDs.
 * Functions returning int return 0 or a positive errno.
 */
#ifndef SRCM_H
#define SRCM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A connection's parameters (struct rdma_conn_param, flattened). */
struct srcm_param {
	uint8_t private_data[256];
	uint32_t private_data_len;
	uint8_t responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq;
	uint32_t qp_num;
};

/* One event, as srcm_next_event hands it to librdmacm. */
struct srcm_event {
	uint64_t id;     /* the C rdma_cm_id of the event's ID; 0 for a new connection */
	uint64_t listen; /* CONNECT_REQUEST: the C rdma_cm_id of the listener */
	uintptr_t newh;  /* CONNECT_REQUEST: the Go handle of the new connection's ID */
	int32_t type, status;
	struct srcm_param param;
	/* UD (port space UDP): the peer's address handle, QP and Q_Key. */
	uint8_t ud, ah_dgid[16], ah_sgid_index, ah_hop_limit, ah_traffic_class, ah_sl;
	uint32_t ah_flow_label, ud_qp_num, ud_qkey;
};

/* What librdmacm shows of an ID in its struct rdma_cm_id. */
struct srcm_info {
	int32_t dev;      /* the device's index in ibv_get_device_list, -1 for none yet */
	int32_t has_qp;
	struct sockaddr_storage src, dst;
	uint8_t sgid[16], dgid[16];
};

#ifndef SRCM_NO_PROTOS
extern uintptr_t srcm_create_channel(int wfd);
extern int srcm_destroy_channel(uintptr_t ch);
/* size: the size of the C struct a new connection's ID needs (calloc'd here);
 * hoff: the offset in it of the ID's handle, written there too. */
extern int srcm_next_event(uintptr_t ch, struct srcm_event *ev, size_t size, size_t hoff);
extern uintptr_t srcm_create_id(uintptr_t ch, uint64_t cptr, int ps, int *err);
extern int srcm_destroy_id(uintptr_t h, int *reported);
extern int srcm_migrate_id(uintptr_t h, uintptr_t ch, int *reported);
extern int srcm_info(uintptr_t h, struct srcm_info *info);
extern int srcm_bind_addr(uintptr_t h, const struct sockaddr *a);
extern int srcm_resolve_addr(uintptr_t h, const struct sockaddr *src, const struct sockaddr *dst, int timeout_ms);
extern int srcm_resolve_route(uintptr_t h, int timeout_ms);
extern int srcm_attach_qp(uintptr_t h, uintptr_t qp);
extern int srcm_release_qp(uintptr_t h);
extern int srcm_connect(uintptr_t h, struct srcm_param *p);
extern int srcm_listen(uintptr_t h, int backlog);
extern int srcm_accept(uintptr_t h, struct srcm_param *p);
extern int srcm_reject(uintptr_t h, const void *pd, int len, int reason);
extern int srcm_disconnect(uintptr_t h);
extern int srcm_set_tos(uintptr_t h, int tos);
/* rdma_init_qp_attr: attr->qp_state in, the attributes and ibv_qp_attr_mask out. */
struct ibv_qp_attr;
extern int srcm_init_qp_attr(uintptr_t h, struct ibv_qp_attr *attr, int *mask);
extern int srcm_establish(uintptr_t h);
extern int srcm_notify(uintptr_t h, int event);
/* rdma_join_multicast(_ex): flags is the join_flags (0 full member, 1 send-only
 * full member); rdma_leave_multicast. */
extern int srcm_join_mcast(uintptr_t h, const struct sockaddr *group, int flags);
extern int srcm_leave_mcast(uintptr_t h, const struct sockaddr *group);
/* C helpers of libibverbs.so.1 (verbs_c.go): the objects behind its structs. */
extern uintptr_t sr_qp_handle(struct ibv_qp *qp);
extern int sr_context_index(struct ibv_context *ctx);
#endif

#endif
