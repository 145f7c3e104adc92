/* cmsteps.h: the steps the rdma_cm test programs share: fail with errno,
 * take the next event of a channel (which must be of one type), and give an
 * ID a small RC QP on its device's default PD. */
#ifndef CMSTEPS_H
#define CMSTEPS_H
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
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

/* ipv4 is the address ADDR, port PORT (the programs' two arguments). */
static inline struct sockaddr_in ipv4(const char *addr, const char *port)
{
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(port));
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		fail("inet_pton");
	return sa;
}

/* listen_and_resolve makes, on channel ch, a listener *l on sa (backlog 1)
 * and a client ID *c whose address and route to sa are resolved. */
static inline void listen_and_resolve(struct rdma_event_channel *ch, struct sockaddr_in *sa, struct rdma_cm_id **l,
				      struct rdma_cm_id **c)
{
	if (!ch || rdma_create_id(ch, l, NULL, RDMA_PS_TCP) || rdma_create_id(ch, c, NULL, RDMA_PS_TCP))
		fail("create");
	if (rdma_bind_addr(*l, (struct sockaddr *)sa) || rdma_listen(*l, 1))
		fail("listen");
	if (rdma_resolve_addr(*c, NULL, (struct sockaddr *)sa, 2000))
		fail("rdma_resolve_addr");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(*c, 2000))
		fail("rdma_resolve_route");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
}
#endif
