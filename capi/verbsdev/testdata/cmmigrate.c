/*
 * cmmigrate: rdma_migrate_id and the events of the ID, as rdma-core's
 * librdmacm over the kernel's rdma_cm defines them (librdmacm/cma.c,
 * rdma_migrate_id; drivers/infiniband/core/ucma.c, ucma_migrate_id):
 *  - the events of the ID still queued move to the new channel, in order,
 *    at once (a listener's are its connection requests);
 *  - the call then waits until each event of the ID the program has taken is
 *    acknowledged, so that none is handled on the old channel after it;
 *  - later events go to the new channel;
 *  - an ID made without a channel (synchronous) cannot move to none: EINVAL.
 * One process connects to itself through one device.
 *
 * Usage: cmmigrate ADDR PORT. Prints "ok" and exits 0, or names the failed
 * check and exits 1.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "cmsteps.h"

static void check(int ok, const char *what)
{
	if (!ok) {
		errno = 0;
		fail(what);
	}
}

/* readable reports whether poll says fd has an event, waiting up to ms. */
static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1;
}

struct migrator {
	struct rdma_cm_id *id;
	struct rdma_event_channel *to;
	int fd; /* a pipe: one byte when rdma_migrate_id returned */
	int ret, err;
};

static void *migrate(void *arg)
{
	struct migrator *m = arg;
	m->ret = rdma_migrate_id(m->id, m->to);
	m->err = errno;
	char b = 1;
	if (write(m->fd, &b, 1) != 1)
		abort();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cmmigrate ADDR PORT\n");
		return 2;
	}
	struct sockaddr_in sa = ipv4(argv[1], argv[2]);
	struct rdma_event_channel *cha = rdma_create_event_channel(), *chb = rdma_create_event_channel(),
				  *chl = rdma_create_event_channel();
	if (!cha || !chb || !chl)
		fail("rdma_create_event_channel");
	int marker;
	struct rdma_cm_id *l, *c;
	if (rdma_create_id(chl, &l, NULL, RDMA_PS_TCP) || rdma_create_id(cha, &c, &marker, RDMA_PS_TCP))
		fail("rdma_create_id");
	if (rdma_bind_addr(l, (struct sockaddr *)&sa) || rdma_listen(l, 1))
		fail("listen");

	/* 1. c's ADDR_RESOLVED taken and not acknowledged, its ROUTE_RESOLVED
	 * queued: the migration moves the queued one at once and returns only
	 * after the acknowledgement. */
	if (rdma_resolve_addr(c, NULL, (struct sockaddr *)&sa, 2000))
		fail("rdma_resolve_addr");
	struct rdma_cm_event *held = next_event(cha, RDMA_CM_EVENT_ADDR_RESOLVED, c);
	if (rdma_resolve_route(c, 2000))
		fail("rdma_resolve_route");
	check(readable(cha->fd, 5000), "c's ROUTE_RESOLVED never queued");
	int p[2];
	if (pipe(p))
		fail("pipe");
	struct migrator m = {.id = c, .to = chb, .fd = p[1]};
	pthread_t th;
	if (pthread_create(&th, NULL, migrate, &m))
		fail("pthread_create");
	/* Without the wait, rdma_migrate_id returns at once; with it, it cannot
	 * return before the ack below. */
	check(!readable(p[0], 500), "rdma_migrate_id returned with an event of the ID taken and not acknowledged");
	check(!readable(cha->fd, 0), "the old channel is readable while the migration waits: the queued event did not move");
	check(readable(chb->fd, 0), "the new channel is not readable while the migration waits: the queued event did not move");
	check(held->id == c && c->context == &marker, "the held event's ID changed during the migration");
	if (rdma_ack_cm_event(held))
		fail("rdma_ack_cm_event ADDR_RESOLVED");
	check(readable(p[0], -1), "rdma_migrate_id never returned");
	errno = m.err;
	if (m.ret)
		fail("rdma_migrate_id");
	pthread_join(th, NULL);
	check(c->channel == chb, "c->channel is not the new channel");
	rdma_ack_cm_event(next_event(chb, RDMA_CM_EVENT_ROUTE_RESOLVED, c));
	check(!readable(cha->fd, 0) && !readable(chb->fd, 0), "a channel is readable with nothing queued");

	/* 2. A listener's queued connection request moves with it, and the new
	 * connection's ID is on the new channel; events after the migration go
	 * to the new channel. */
	qp(c);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.initiator_depth = cp.responder_resources = 1;
	cp.retry_count = cp.rnr_retry_count = 7;
	if (rdma_connect(c, &cp))
		fail("rdma_connect");
	check(readable(chl->fd, 5000), "the connection request never queued on the listener's channel");
	if (rdma_migrate_id(l, cha))
		fail("rdma_migrate_id of the listener");
	check(!readable(chl->fd, 0), "the listener's old channel is readable after the migration");
	struct rdma_cm_event *req = next_event(cha, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	check(req->listen_id == l, "the request does not name the migrated listener");
	struct rdma_cm_id *s = req->id;
	check(s->channel == cha, "the new connection's ID is not on the listener's new channel");
	rdma_ack_cm_event(req);
	qp(s);
	if (rdma_accept(s, &cp))
		fail("rdma_accept");
	rdma_ack_cm_event(next_event(cha, RDMA_CM_EVENT_ESTABLISHED, s));
	rdma_ack_cm_event(next_event(chb, RDMA_CM_EVENT_ESTABLISHED, c));

	/* 3. A synchronous ID (made without a channel) cannot move to none
	 * (rdma-core: EINVAL); it can move to a channel. */
	struct rdma_cm_id *sid;
	if (rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP))
		fail("rdma_create_id without a channel");
	errno = 0;
	check(rdma_migrate_id(sid, NULL) == -1 && errno == EINVAL,
	      "rdma_migrate_id of a synchronous ID to no channel is not EINVAL");
	if (rdma_migrate_id(sid, chl))
		fail("rdma_migrate_id of a synchronous ID to a channel");
	check(sid->channel == chl, "the synchronous ID's channel is not the new one");
	if (rdma_destroy_id(sid))
		fail("rdma_destroy_id of the migrated synchronous ID");

	rdma_disconnect(c);
	printf("ok\n");
	return 0;
}
