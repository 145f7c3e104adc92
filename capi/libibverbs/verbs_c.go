package main

// The C side of the verbs entry points: rdma-core's prototypes (verbs.h), the
// structs programs see, and calls into the Go side (exports.go, srgo_*). The
// definitions live here, in a file without //export, because cgo copies the
// preamble of an exporting file into _cgo_export.c.

/*
#cgo CFLAGS: -O2 -Wall
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

// The Go side (exports.go).
extern int srgo_ndevices(void);
extern void srgo_device_name(int i, char *buf, int n, int *iwarp);
extern uint64_t srgo_node_guid(int i);
extern uint32_t srgo_ifindex(int i);
extern void srgo_query_device(int i, struct ibv_device_attr *a);
extern int srgo_query_port(int i, uint8_t port, struct ibv_port_attr *a);
extern int srgo_query_gid(int i, uint32_t port, int index, uint8_t *raw);
extern int srgo_query_pkey(int i, uint8_t port, int index);
extern uintptr_t srgo_alloc_pd(int i, int *err);
extern int srgo_dealloc_pd(uintptr_t h);

// sr_device is what ibv_get_device_list hands out: rdma-core's struct with the
// index of the Go device behind it.
struct sr_device {
	struct ibv_device dev;
	int idx;
};

// sr_context is an open device. verbs_context ends in the ibv_context the
// program gets, and abi_compat says it is extended, so verbs.h's inline
// functions find the ops (query_port, query_device_ex) through it.
struct sr_context {
	int idx;
	struct verbs_context vc;
};

struct sr_pd {
	struct ibv_pd pd;
	uintptr_t h;
};

static struct sr_device **sr_devices;
static int sr_ndevices;
static pthread_once_t sr_once = PTHREAD_ONCE_INIT;

static void sr_load(void)
{
	int n = srgo_ndevices();
	if (n <= 0)
		return;
	sr_devices = calloc(n, sizeof(*sr_devices));
	if (!sr_devices)
		return;
	for (int i = 0; i < n; i++) {
		struct sr_device *d = calloc(1, sizeof(*d));
		if (!d)
			return;
		int iwarp = 0;
		srgo_device_name(i, d->dev.name, sizeof(d->dev.name), &iwarp);
		d->idx = i;
		d->dev.node_type = iwarp ? IBV_NODE_RNIC : IBV_NODE_CA;
		d->dev.transport_type = iwarp ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB;
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
		snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", d->dev.name);
		sr_devices[i] = d;
		sr_ndevices = i + 1;
	}
}

static struct sr_device *sr_dev(struct ibv_device *dev)
{
	return (struct sr_device *)dev;
}

static struct sr_context *sr_ctx(struct ibv_context *ctx)
{
	struct verbs_context *vc = (struct verbs_context *)((char *)ctx - offsetof(struct verbs_context, context));
	return (struct sr_context *)((char *)vc - offsetof(struct sr_context, vc));
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	pthread_once(&sr_once, sr_load);
	struct ibv_device **l = calloc(sr_ndevices + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < sr_ndevices; i++)
		l[i] = &sr_devices[i]->dev;
	if (num_devices)
		*num_devices = sr_ndevices;
	return l;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (!device)
		return 0;
	return htobe64(srgo_node_guid(sr_dev(device)->idx));
}

int ibv_get_device_index(struct ibv_device *device)
{
	return device ? sr_dev(device)->idx : -1;
}

static int sr_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a;
	memset(&a, 0, sizeof(a));
	int rc = srgo_query_port(sr_ctx(ctx)->idx, port, &a);
	if (rc)
		return rc;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

static int sr_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			      struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;
	if (input && input->comp_mask)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	srgo_query_device(sr_ctx(ctx)->idx, &a.orig_attr);
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_context *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->idx = sr_dev(device)->idx;
	c->vc.sz = sizeof(c->vc);
	c->vc.query_port = sr_query_port;
	c->vc.query_device_ex = sr_query_device_ex;
	struct ibv_context *ctx = &c->vc.context;
	ctx->device = device;
	ctx->cmd_fd = -1;
	ctx->async_fd = -1;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	if (!ctx)
		return EINVAL;
	struct sr_context *c = sr_ctx(ctx);
	pthread_mutex_destroy(&ctx->mutex);
	free(c);
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	if (!ctx || !attr)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	srgo_query_device(sr_ctx(ctx)->idx, attr);
	return 0;
}

// ibv_query_port is the exported fallback of verbs.h's inline ibv_query_port
// for contexts without the extended op; it fills the old, shorter struct
// (_compat_ibv_port_attr, without port_cap_flags2).
int (ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	if (!ctx || !attr)
		return EINVAL;
	return sr_query_port(ctx, port, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, port_cap_flags2));
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	if (!ctx || !gid)
		return EINVAL;
	if (srgo_query_gid(sr_ctx(ctx)->idx, port, index, gid->raw))
		return -1;
	return 0;
}

// ibv_query_gid_type (IBVERBS_PRIVATE_34, driver.h) gives the type of a GID
// table entry: 1 is IBV_GID_TYPE_SYSFS_ROCE_V2 (every RoCE entry, as rxe's),
// 0 IBV_GID_TYPE_SYSFS_IB_ROCE_V1 (iWARP, as siw's).
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	union ibv_gid gid;
	if (!ctx || !type)
		return EINVAL;
	if (srgo_query_gid(sr_ctx(ctx)->idx, port, (int)index, gid.raw))
		return -1;
	*type = ctx->device->transport_type == IBV_TRANSPORT_IB ? 1 : 0;
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	if (!ctx || !entry || flags || entry_size < sizeof(*entry))
		return EINVAL;
	memset(entry, 0, sizeof(*entry));
	if (srgo_query_gid(sr_ctx(ctx)->idx, port, (int)index, entry->gid.raw))
		return EINVAL;
	for (int i = 0; i < 16; i++)
		if (entry->gid.raw[i])
			goto found;
	return ENODATA;
found:
	entry->gid_index = index;
	entry->port_num = port;
	entry->gid_type = ctx->device->transport_type == IBV_TRANSPORT_IB ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB;
	entry->ndev_ifindex = srgo_ifindex(sr_ctx(ctx)->idx);
	return 0;
}

int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	if (!ctx || !pkey)
		return EINVAL;
	int v = srgo_query_pkey(sr_ctx(ctx)->idx, port, index);
	if (v < 0)
		return -1;
	*pkey = htobe16((uint16_t)v);
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	if (!ctx) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_pd *p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	int err = 0;
	p->h = srgo_alloc_pd(sr_ctx(ctx)->idx, &err);
	if (!p->h) {
		free(p);
		errno = err;
		return NULL;
	}
	p->pd.context = ctx;
	p->pd.handle = (uint32_t)p->h;
	return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	struct sr_pd *p = (struct sr_pd *)pd;
	int rc = srgo_dealloc_pd(p->h);
	if (rc)
		return rc;
	free(p);
	return 0;
}

// ibv_read_sysfs_file reads dir/file, as rdma-core's does: the bytes read,
// without a trailing newline, NUL-terminated; -1 if it cannot be read.
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[512];
	if (!dir || !file || !buf || size == 0)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n < 0)
		return -1;
	if ((size_t)n == size)
		n--;
	if (n > 0 && buf[n - 1] == '\n')
		n--;
	buf[n] = 0;
	return (int)n;
}

int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {"unknown", "InfiniBand channel adapter", "InfiniBand switch",
		"InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
	if ((int)t < 0 || (size_t)t >= sizeof(s) / sizeof(s[0]))
		return "unknown";
	return s[t];
}

const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = {"no state change (NOP)", "down", "init", "armed", "active", "active defer"};
	if ((int)s < 0 || (size_t)s >= sizeof(n) / sizeof(n[0]))
		return "unknown";
	return n[s];
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((int)status < 0 || (size_t)status >= sizeof(s) / sizeof(s[0]) || !s[status])
		return "unknown";
	return s[status];
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
	static const char *const s[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	if ((int)event < 0 || (size_t)event >= sizeof(s) / sizeof(s[0]) || !s[event])
		return "unknown";
	return s[event];
}

int ibv_dontfork_range(void *base, size_t size)
{
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}
*/
import "C"
