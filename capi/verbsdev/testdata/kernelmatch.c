/*
 * kernelmatch: answers the library must give as the kernel's drivers and
 * rdma_cm give them (rxe for RoCE, siw for iWARP), one line per check
 * (checks.h):
 *  - ibv_create_cq's cq->cqe for 1, 100 and max_cqe entries: rxe's queue
 *    holds cqe+1 rounded up to a power of two, less one (rxe_queue_init):
 *    1, 127, 32767; siw rounds cqe up to a power of two (siw_create_cq):
 *    1, 128, 4194304;
 *  - iWARP: an atomic WR is refused at post with libsiw's -EINVAL, negative
 *    (rdma-core providers/siw: "opcode N unsupported"; siw has no atomics);
 *  - rdma_create_id with RDMA_PS_IB makes an RC ID (the kernel's
 *    ucma_get_qp_type), which binds the port a TCP ID listens on (a port
 *    space of its own), connects to a PS_IB listener on that port and is
 *    taken by it, not by the TCP one;
 *  - rdma_resolve_addr to the device's own address with port 0 succeeds
 *    (the kernel's rdma_resolve_addr does not look at the port);
 *  - rdma_resolve_addr to 0.0.0.0 resolves to the device itself (the
 *    kernel's cma_resolve_loopback), unbound and bound: the PS_IB client
 *    connects to its listener through 0.0.0.0:PORT;
 *  - RDMA_PS_IPOIB makes a UD ID (ucma_get_qp_type) in a port space of its
 *    own (binds the port TCP and IB IDs hold, not twice); its QP's Q_Key
 *    would be the IPoIB broadcast group's, which a RoCE port lacks:
 *    rdma_create_qp fails with ENODEV (cma_set_default_qkey); on iWARP
 *    with siw's EOPNOTSUPP for a UD QP.
 * One process connects to itself through one device.
 *
 * Usage: kernelmatch ADDR PORT. Prints "checks: N, bad: M" last and exits 1
 * if a check failed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "checks.h"
#include "cmsteps.h"

static void cq_depths(struct ibv_context *ctx, int iwarp)
{
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		fail("ibv_query_device");
	const struct {
		int cqe, rxe, siw;
	} sizes[] = {{1, 1, 1}, {100, 127, 128}, {da.max_cqe, 32767, 4194304}};
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char name[64];
		snprintf(name, sizeof(name), "create_cq %d: cq->cqe", sizes[i].cqe);
		mark(name, 0);
		struct ibv_cq *cq = ibv_create_cq(ctx, sizes[i].cqe, NULL, NULL, 0);
		expect(name, cq ? cq->cqe : -errno, iwarp ? sizes[i].siw : sizes[i].rxe);
		if (cq)
			ibv_destroy_cq(cq);
	}
}

/* atomic_refused posts a FETCH_AND_ADD to a new RC QP of an iWARP device. */
static void atomic_refused(struct ibv_context *ctx)
{
	static uint64_t word;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	struct ibv_mr *mr = cq ? ibv_reg_mr(pd, &word, sizeof(word), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *q = mr ? ibv_create_qp(pd, &qa) : NULL;
	if (!q)
		fail("atomic: setup");
	struct ibv_sge sg = {.addr = (uintptr_t)&word, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED}, *bad_wr = NULL;
	wr.wr.atomic.remote_addr = 0x1000;
	wr.wr.atomic.rkey = 1;
	wr.wr.atomic.compare_add = 1;
	RC("iwarp: post FETCH_AND_ADD", -EINVAL, ibv_post_send(q, &wr, &bad_wr));
	expect("iwarp: bad_wr is the atomic WR", bad_wr == &wr, 1);
	ibv_destroy_qp(q);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

static struct rdma_cm_id *listener(struct rdma_event_channel *ch, enum rdma_port_space ps, struct sockaddr_in *a)
{
	struct rdma_cm_id *l;
	if (rdma_create_id(ch, &l, NULL, ps))
		fail("listener: rdma_create_id");
	if (rdma_bind_addr(l, (struct sockaddr *)a) || rdma_listen(l, 4))
		fail("listener: bind/listen");
	return l;
}

/* ipoib checks RDMA_PS_IPOIB's IDs; TCP and IB IDs are bound to a. */
static void ipoib(struct rdma_event_channel *ch, struct sockaddr_in *a, int iwarp)
{
	struct rdma_cm_id *id, *id2;
	RC("create_id RDMA_PS_IPOIB", 0, rdma_create_id(ch, &id, NULL, RDMA_PS_IPOIB) ? errno : 0);
	if (rc_last)
		return;
	expect("RDMA_PS_IPOIB: ps", id->ps, RDMA_PS_IPOIB);
	expect("RDMA_PS_IPOIB: qp_type UD", id->qp_type, IBV_QPT_UD);
	RC("RDMA_PS_IPOIB: bind the port TCP and IB hold", 0, rdma_bind_addr(id, (struct sockaddr *)a) ? errno : 0);
	if (rdma_create_id(ch, &id2, NULL, RDMA_PS_IPOIB))
		fail("rdma_create_id");
	RC("RDMA_PS_IPOIB: bind it twice", EADDRINUSE, rdma_bind_addr(id2, (struct sockaddr *)a) ? errno : 0);
	rdma_destroy_id(id2);
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	RC("RDMA_PS_IPOIB: rdma_create_qp", iwarp ? EOPNOTSUPP : ENODEV, rdma_create_qp(id, NULL, &qa) ? errno : 0);
	if (!rc_last)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: kernelmatch ADDR PORT\n");
		return 2;
	}
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1)
		return 2;
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!ctx)
		fail("ibv_open_device");
	int iwarp = l[0]->transport_type == IBV_TRANSPORT_IWARP;
	cq_depths(ctx, iwarp);
	if (iwarp)
		atomic_refused(ctx);

	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	if (!sch || !cch)
		fail("rdma_create_event_channel");

	/* Port 0: resolves, as the kernel resolves it. */
	struct rdma_cm_id *r;
	if (rdma_create_id(cch, &r, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	struct sockaddr_in self0 = a;
	self0.sin_port = 0;
	RC("resolve_addr own address, port 0", 0, rdma_resolve_addr(r, NULL, (struct sockaddr *)&self0, 2000) ? errno : 0);
	if (!rc_last) {
		struct rdma_cm_event *ev = next(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
		expect("resolve_addr own address, port 0: ADDR_RESOLVED", ev->id == r, 1);
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_id(r);

	/* 0.0.0.0: loopback, as the kernel resolves it. */
	struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = a.sin_port};
	if (rdma_create_id(cch, &r, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	RC("resolve_addr 0.0.0.0", 0, rdma_resolve_addr(r, NULL, (struct sockaddr *)&any, 2000) ? errno : 0);
	if (!rc_last) {
		struct rdma_cm_event *ev = next(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
		expect("resolve_addr 0.0.0.0: ADDR_RESOLVED", ev->id == r, 1);
		rdma_ack_cm_event(ev);
		/* The kernel's source is 127.0.0.1 on its first device; ours is
		 * the first device's address. */
		struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(r);
		expect("resolve_addr 0.0.0.0: source is the device's address", src->sin_addr.s_addr == a.sin_addr.s_addr, 1);
	}
	rdma_destroy_id(r);

	/* RDMA_PS_IB: an RC ID in a port space of its own. */
	struct rdma_cm_id *c;
	RC("create_id RDMA_PS_IB", 0, rdma_create_id(cch, &c, NULL, RDMA_PS_IB) ? errno : 0);
	if (rc_last) {
		printf("checks: %d, bad: %d\n", total, bad);
		return 1;
	}
	expect("RDMA_PS_IB: ps", c->ps, RDMA_PS_IB);
	expect("RDMA_PS_IB: qp_type RC", c->qp_type, IBV_QPT_RC);
	struct rdma_cm_id *lib = listener(sch, RDMA_PS_IB, &a), *ltcp = NULL;
	/* iWARP's listeners are TCP sockets: one per port, whatever the port
	 * space (siw's listen of a second would be EADDRINUSE). */
	if (!iwarp)
		ltcp = listener(sch, RDMA_PS_TCP, &a);
	ipoib(cch, &a, iwarp);

	struct sockaddr_in src = a;
	src.sin_port = 0;
	if (rdma_bind_addr(c, (struct sockaddr *)&src))
		fail("rdma_bind_addr");
	RC("resolve_addr 0.0.0.0:PORT, bound", 0, rdma_resolve_addr(c, NULL, (struct sockaddr *)&any, 2000) ? errno : 0);
	if (rc_last) {
		printf("checks: %d, bad: %d\n", total, bad);
		return 1;
	}
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(c, 2000))
		fail("rdma_resolve_route");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	qp(c);
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	if (rdma_connect(c, &p))
		fail("rdma_connect");
	struct rdma_cm_event *ev = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	expect("RDMA_PS_IB: request taken by the PS_IB listener", ev->listen_id == lib, 1);
	struct rdma_cm_id *s = ev->id;
	rdma_ack_cm_event(ev);
	qp(s);
	if (rdma_accept(s, &p))
		fail("rdma_accept");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_ESTABLISHED));
	expect("RDMA_PS_IB: connected", 1, 1);

	/* The server's DISCONNECTED comes with the DREQ; the client's with
	 * the DREP the server's rdma_disconnect sends (RoCE). */
	rdma_disconnect(c);
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_disconnect(s);
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
	rdma_destroy_id(lib);
	if (ltcp)
		rdma_destroy_id(ltcp);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("checks: %d, bad: %d\n", total, bad);
	return bad != 0;
}
