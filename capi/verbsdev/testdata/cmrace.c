/*
 * cmrace: rdma_destroy_id on one thread while another takes the ID's event,
 * as rping does at its end (its main thread destroys the ID whose
 * DISCONNECTED its CM thread is taking). rdma_get_cm_event reads the ID's
 * state from the engine after taking the event; the destroy may come between
 * the two. Whichever wins, the process goes on: the event is taken (and the
 * destroy waits for its ack) or dropped with the ID, and nothing panics.
 * Each round: an ID resolves ADDR (its ADDR_RESOLVED queued), then a barrier
 * starts both threads at once. Then rping's very end: its main thread
 * destroys the channel its CM thread waits on, just after an event woke the
 * thread and went with its ID; the thread waits on (rdma-core's read of the
 * ucma file blocks until the process exits) and returns no error.
 *
 * Usage: cmrace ADDR ROUNDS (an address of the softrdma device in
 * SOFTRDMA_DEVICES). Prints "ok" and the rounds whose event was taken and
 * dropped, and exits 0, or names the check that failed and exits 1.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "cmsteps.h"

static struct rdma_event_channel *ch;
static pthread_barrier_t start, done;
static int taken, rounds;

/* taker takes the round's event, if the destroy left it, and acknowledges it. */
static void *taker(void *arg)
{
	(void)arg;
	for (int i = 0; i < rounds; i++) {
		pthread_barrier_wait(&start);
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(ch, &ev) == 0) {
			if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
				printf("FAIL: round %d: event %s, want ADDR_RESOLVED\n", i, rdma_event_str(ev->event));
				exit(1);
			}
			taken++;
			if (rdma_ack_cm_event(ev))
				fail("rdma_ack_cm_event");
		} else if (errno != EAGAIN) {
			fail("rdma_get_cm_event");
		}
		pthread_barrier_wait(&done);
	}
	return NULL;
}

/* waiter takes the events of its channel until an error, which fails. */
static void *waiter(void *arg)
{
	struct rdma_event_channel *c = arg;
	for (;;) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(c, &ev))
			fail("rdma_get_cm_event on a channel destroyed while it waited");
		rdma_ack_cm_event(ev);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cmrace ADDR ROUNDS\n");
		return 2;
	}
	struct sockaddr_in dst = ipv4(argv[1], "7999");
	rounds = atoi(argv[2]);
	ch = rdma_create_event_channel();
	if (!ch)
		fail("rdma_create_event_channel");
	/* Non-blocking: a round whose event went with its ID finds none. */
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		fail("fcntl O_NONBLOCK");
	if (pthread_barrier_init(&start, NULL, 2) || pthread_barrier_init(&done, NULL, 2))
		fail("pthread_barrier_init");
	pthread_t th;
	if (pthread_create(&th, NULL, taker, NULL))
		fail("pthread_create");
	for (int i = 0; i < rounds; i++) {
		struct rdma_cm_id *id;
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			fail("rdma_create_id");
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
			fail("rdma_resolve_addr");
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		if (poll(&p, 1, 5000) != 1)
			fail("the ADDR_RESOLVED never queued");
		pthread_barrier_wait(&start);
		if (rdma_destroy_id(id))
			fail("rdma_destroy_id");
		pthread_barrier_wait(&done);
	}
	pthread_join(th, NULL);
	rdma_destroy_event_channel(ch);
	for (int i = 0; i < rounds / 10; i++) {
		struct rdma_event_channel *c = rdma_create_event_channel();
		struct rdma_cm_id *id;
		if (!c || rdma_create_id(c, &id, NULL, RDMA_PS_TCP))
			fail("rdma_create_id (waiter)");
		if (pthread_create(&th, NULL, waiter, c))
			fail("pthread_create");
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
			fail("rdma_resolve_addr (waiter)");
		usleep(1000);
		if (rdma_destroy_id(id))
			fail("rdma_destroy_id (waiter)");
		rdma_destroy_event_channel(c);
		usleep(1000);
	}
	printf("ok: %d rounds, event taken in %d, dropped with its ID in %d\n", rounds, taken, rounds - taken);
	return 0;
}
