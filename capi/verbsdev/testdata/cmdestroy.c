/*
 * cmdestroy: rdma_destroy_id and the events of the ID, as rdma-core's
 * librdmacm defines them (librdmacm/cma.c, rdma_destroy_id): the events the
 * program has taken with rdma_get_cm_event and not yet acknowledged keep the
 * ID alive, rdma_destroy_id waits until each is acknowledged; the events
 * still queued, not taken, go with the ID (the kernel's ucma_destroy_id
 * drops them) and are never returned. The channel's fd is readable exactly
 * when an event is queued: dropped (destroy) or moved (rdma_migrate_id),
 * an event leaves no readiness behind.
 *
 * Usage: cmdestroy ADDR (an address of the softrdma device in
 * SOFTRDMA_DEVICES). Prints "ok" and exits 0, or names the check that failed
 * and exits 1.
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

static int fail(const char *what)
{
	printf("FAIL: %s (errno %d: %s)\n", what, errno, strerror(errno));
	exit(1);
}

struct destroyer {
	struct rdma_cm_id *id;
	int fd;        /* a pipe: one byte when rdma_destroy_id returned */
	int ret;
};

static void *destroy(void *arg)
{
	struct destroyer *d = arg;
	d->ret = rdma_destroy_id(d->id);
	char b = 1;
	if (write(d->fd, &b, 1) != 1)
		abort();
	return NULL;
}

/* returned reports whether the destroyer's byte is there, waiting up to ms. */
static int returned(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1;
}

/* readable reports whether poll says fd has an event, at once. */
static int readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1;
}

static void resolve(struct rdma_cm_id *id, struct sockaddr_in *dst)
{
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, 2000))
		fail("rdma_resolve_addr");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cmdestroy ADDR\n");
		return 2;
	}
	struct sockaddr_in dst;
	memset(&dst, 0, sizeof(dst));
	dst.sin_family = AF_INET;
	dst.sin_port = htons(7999);
	if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1)
		fail("inet_pton");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		fail("rdma_create_event_channel");

	/* 1. An event taken and not acknowledged: rdma_destroy_id waits for its
	 * rdma_ack_cm_event, and the event's ID is the program's until then. */
	int marker;
	struct rdma_cm_id *a;
	if (rdma_create_id(ch, &a, &marker, RDMA_PS_TCP))
		fail("rdma_create_id a");
	resolve(a, &dst);
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		fail("rdma_get_cm_event a");
	if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED || ev->id != a)
		fail("a's first event is not its ADDR_RESOLVED");
	int p[2];
	if (pipe(p))
		fail("pipe");
	struct destroyer d = {.id = a, .fd = p[1]};
	pthread_t th;
	if (pthread_create(&th, NULL, destroy, &d))
		fail("pthread_create");
	/* Without the wait, rdma_destroy_id returns at once (and frees the ID
	 * the event names); with it, it cannot return before the ack below. */
	if (returned(p[0], 500)) {
		errno = 0;
		fail("rdma_destroy_id returned with an event of the ID not acknowledged");
	}
	if (ev->id->context != &marker) {
		errno = 0;
		fail("the unacknowledged event's ID lost its context during rdma_destroy_id");
	}
	if (rdma_ack_cm_event(ev))
		fail("rdma_ack_cm_event a");
	if (!returned(p[0], -1) || d.ret)
		fail("rdma_destroy_id a after the ack");
	pthread_join(th, NULL);

	/* 2. Events queued and not taken go with the ID: destroy returns at once
	 * and rdma_get_cm_event never returns them (the channel is then empty). */
	struct rdma_cm_id *b;
	if (rdma_create_id(ch, &b, NULL, RDMA_PS_TCP))
		fail("rdma_create_id b");
	resolve(b, &dst);
	struct pollfd pf = {.fd = ch->fd, .events = POLLIN};
	if (poll(&pf, 1, 5000) != 1)
		fail("b's ADDR_RESOLVED never queued");
	if (rdma_destroy_id(b))
		fail("rdma_destroy_id b with its event queued");
	if (readable(ch->fd)) {
		errno = 0;
		fail("the channel fd is readable after rdma_destroy_id dropped its only event");
	}
	struct rdma_cm_id *c;
	if (rdma_create_id(ch, &c, NULL, RDMA_PS_TCP))
		fail("rdma_create_id c");
	resolve(c, &dst);
	if (rdma_get_cm_event(ch, &ev))
		fail("rdma_get_cm_event c");
	if (ev->id != c || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
		errno = 0;
		fail("the channel returned an event of the destroyed ID b");
	}
	/* 3. The ID's own acknowledged events do not hold rdma_destroy_id. */
	if (rdma_ack_cm_event(ev))
		fail("rdma_ack_cm_event c");
	if (rdma_destroy_id(c))
		fail("rdma_destroy_id c");

	/* 4. rdma_migrate_id moves a queued event, and its readiness, to the
	 * new channel: the old fd is no longer readable, the new one is. */
	struct rdma_event_channel *ch2 = rdma_create_event_channel();
	if (!ch2)
		fail("rdma_create_event_channel 2");
	struct rdma_cm_id *m;
	if (rdma_create_id(ch, &m, NULL, RDMA_PS_TCP))
		fail("rdma_create_id m");
	resolve(m, &dst);
	if (poll(&pf, 1, 5000) != 1)
		fail("m's ADDR_RESOLVED never queued");
	if (rdma_migrate_id(m, ch2))
		fail("rdma_migrate_id m");
	errno = 0;
	if (readable(ch->fd))
		fail("the old channel fd is readable after rdma_migrate_id moved its only event");
	if (!readable(ch2->fd))
		fail("the new channel fd is not readable after rdma_migrate_id moved an event to it");
	if (rdma_get_cm_event(ch2, &ev))
		fail("rdma_get_cm_event m on the new channel");
	if (ev->id != m || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
		errno = 0;
		fail("the new channel's event is not m's ADDR_RESOLVED");
	}
	if (rdma_ack_cm_event(ev))
		fail("rdma_ack_cm_event m");
	errno = 0;
	if (readable(ch2->fd))
		fail("the new channel fd is readable with its event taken");
	if (rdma_destroy_id(m))
		fail("rdma_destroy_id m");
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
