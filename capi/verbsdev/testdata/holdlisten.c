/*
 * holdlisten.so, preloaded (LD_PRELOAD) into an rdma_cm server, holds its
 * second rdma_listen forever in the first process of a test that gets there,
 * and lets every later process's pass: TestCMPairRejectedLate's way to make
 * perftest -R's second connection, the one for the measured QPs, meet a server
 * that does not listen yet, every time, without timing.
 *
 * perftest -R connects twice on the same port: first the QP it exchanges
 * parameters over, then (after a handshake over that QP, on which the client
 * connects at once while the server first destroys its listener and creates a
 * new one) the measured QPs. A client that is quicker than the server's second
 * rdma_listen is rejected (IB CM REJ, invalid service ID; over iWARP the TCP
 * connection is refused); the server, which has already taken the client's
 * first connection, then waits for a second one that never comes.
 *
 * HOLDLISTEN_ONCE names a file: the process that creates it (O_EXCL) is the
 * one that holds; a process that finds it there does not.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

struct rdma_cm_id;

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	static int calls;
	int (*next)(struct rdma_cm_id *, int) = (int (*)(struct rdma_cm_id *, int))dlsym(RTLD_NEXT, "rdma_listen");
	const char *once = getenv("HOLDLISTEN_ONCE");

	if (++calls == 2 && once) {
		int fd = open(once, O_CREAT | O_EXCL | O_WRONLY, 0600);
		if (fd >= 0) {
			close(fd);
			for (;;)
				pause();
		}
	}
	return next(id, backlog);
}
