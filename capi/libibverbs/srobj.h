/* The C objects behind the ibv_cq and ibv_qp pointers the library hands out,
 * shared by verbs_c.go and the extended verbs (extended_c.go). Each begins
 * with rdma-core's struct, so the program's pointer is the object's. A CQ
 * and a QP are large enough for their extended forms (ibv_cq_ex, ibv_qp_ex),
 * whose leading fields are the plain structs', so that ibv_create_cq_ex and
 * ibv_create_qp_ex make the same objects every other verb takes. */
#ifndef SROBJ_H
#define SROBJ_H

#include <pthread.h>
#include <stdint.h>
#include <infiniband/verbs.h>

struct sr_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	};
	uintptr_t h;
	struct ibv_wc xwc; /* the extended CQ's current completion (start_poll, next_poll) */
	/* xmu makes ibv_start_poll .. ibv_end_poll a critical section, as rxe's
	 * CQ lock does: xwc is the polling thread's until ibv_end_poll. */
	pthread_mutex_t xmu;
	/* sr_poll_cq: the engine's completion count (sr_wake.seq) read before
	 * the last poll that left the CQ empty, +1 (0: none known) */
	uint32_t empty_at;
};

struct sr_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx;
	};
	uintptr_t h;
	void *ext; /* an extended QP's work request builder (extended_c.go), or NULL */
};

#endif
