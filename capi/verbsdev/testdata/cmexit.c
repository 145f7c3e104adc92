/* cmexit: a server that exits without destroying its connection, as qperf's
 * server children do, and a client that disconnects and waits for its
 * DISCONNECTED event.
 *   cmexit -s ADDR PORT   listen, accept one connection, wait for its
 *                         DISCONNECTED event, exit(0) with every ID, QP and
 *                         channel left as it is
 *   cmexit -b ADDR PORT   the same, with two threads taking events of an
 *                         empty non-blocking channel in a loop as it exits:
 *                         each call takes the library's rdma_cm lock, which
 *                         the exit must wait for, not give up on
 *   cmexit -c ADDR PORT   connect, rdma_disconnect, print the DISCONNECTED
 *                         event's status ("disconnected: status N"); exit 0
 *                         when it is 0
 * The kernel destroys a process's IDs when it exits: the server's answers the
 * client's DREQ with a DREP, and the client's DISCONNECTED has status 0. A
 * DREQ left unanswered ends in DISCONNECTED with status -ETIMEDOUT, after the
 * DREQ's retries (a minute and more). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static struct rdma_event_channel *ch;

static struct rdma_cm_event *expect(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) {
		perror("rdma_get_cm_event");
		exit(1);
	}
	if (ev->event != want) {
		fprintf(stderr, "event %s (status %d), want %s\n", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		exit(1);
	}
	return ev;
}

static void qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	if (rdma_create_qp(id, NULL, &a)) {
		perror("rdma_create_qp");
		exit(1);
	}
}

/* busy takes events of the empty non-blocking channel c until the process
 * ends: each call takes the library's rdma_cm lock for a moment. calls
 * counts them. */
static long calls;
static void *busy(void *c)
{
	struct rdma_cm_event *ev;
	for (;;) {
		if (!rdma_get_cm_event(c, &ev))
			rdma_ack_cm_event(ev);
		__atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: cmexit -s|-b|-c ADDR PORT\n");
		return 2;
	}
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
	inet_pton(AF_INET, argv[2], &sin.sin_addr);
	struct rdma_cm_id *id;
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	if (!strcmp(argv[1], "-s") || !strcmp(argv[1], "-b")) {
		if (rdma_bind_addr(id, (struct sockaddr *)&sin) || rdma_listen(id, 1)) {
			perror("bind/listen");
			return 1;
		}
		struct rdma_cm_event *ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
		struct rdma_cm_id *conn = ev->id;
		rdma_ack_cm_event(ev);
		qp(conn);
		if (rdma_accept(conn, &p)) {
			perror("rdma_accept");
			return 1;
		}
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
		printf("server: disconnected; exiting with the connection's ID\n");
		fflush(stdout);
		if (!strcmp(argv[1], "-b")) {
			struct rdma_event_channel *idle = rdma_create_event_channel();
			if (!idle || fcntl(idle->fd, F_SETFL, fcntl(idle->fd, F_GETFL) | O_NONBLOCK)) {
				perror("idle channel");
				return 1;
			}
			for (int i = 0; i < 2; i++) {
				pthread_t th;
				if (pthread_create(&th, NULL, busy, idle)) {
					perror("pthread_create");
					return 1;
				}
			}
			while (__atomic_load_n(&calls, __ATOMIC_RELAXED) < 10000)
				;
		}
		return 0;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000)) {
		perror("rdma_resolve_addr");
		return 1;
	}
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 2000)) {
		perror("rdma_resolve_route");
		return 1;
	}
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	qp(id);
	if (rdma_connect(id, &p)) {
		perror("rdma_connect");
		return 1;
	}
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	if (rdma_disconnect(id)) {
		perror("rdma_disconnect");
		return 1;
	}
	struct rdma_cm_event *ev = expect(RDMA_CM_EVENT_DISCONNECTED);
	int status = ev->status;
	printf("disconnected: status %d\n", status);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return status != 0;
}
