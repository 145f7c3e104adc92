/* cmsteps.h: the steps the rdma_cm test programs share: fail with errno,
 * take the next event of a channel (which must be of one type), and give an
 * ID a small RC QP on its device's default PD. */
#ifndef CMSTEPS_H
#define CMSTEPS_H
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static void fail(const char *what)
{
	printf("FAIL: %s (errno %d: %s)\n", what, errno, strerror(errno));
	exit(1);
}

/* next_event takes the next event of ch, which must be want; of id, unless
 * id is NULL. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
					struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		fail("rdma_get_cm_event");
	if (ev->event != want || (id && ev->id != id)) {
		printf("FAIL: event %s (status %d) of %p, want %s of %p\n", rdma_event_str(ev->event), ev->status,
		       (void *)ev->id, rdma_event_str(want), (void *)id);
		exit(1);
	}
	return ev;
}

/* next takes the next event of ch, which must be want. */
static inline struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	return next_event(ch, want, NULL);
}

/* qp gives id an RC QP of 4 WRs and 1 SGE each way. */
static inline void qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &a))
		fail("rdma_create_qp");
}
#endif
