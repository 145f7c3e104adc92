/*
 * cmgate.so: an LD_PRELOAD aid of the interop tests (test/interop/cmgate.go),
 * for a perftest -R client on softrdma's librdmacm.so.1 against a server in a
 * guest. perftest makes two rdma_cm connections: the first carries its
 * out-of-band exchange, then both ends make the test connection, the server
 * listening anew on the same port. Its client may connect before the slow
 * (emulated) guest listens; the refusal is what the kernel gives (a TCP RST
 * or a CM REJ), and perftest 4.5-0.17's retry after it reads freed memory
 * (rdma_cm_client_connection calls rdma_cm_destroy_cma, which frees the
 * nodes, then rdma_resolve_addr on nodes[i].cma_id): it crashes on rdma-core's
 * librdmacm as on ours (fixed upstream in perftest 3d9d8d0). The test must not
 * depend on that race, so this holds the client's rdma_resolve_addr number
 * SOFTRDMA_TEST_CMGATE_CALL (default 2: the test connection's) until the test
 * has seen the server listen: it creates $SOFTRDMA_TEST_CMGATE.wait and waits
 * for $SOFTRDMA_TEST_CMGATE.go. Without SOFTRDMA_TEST_CMGATE it does nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	static int calls;
	int (*real)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int) =
		(int (*)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int))dlsym(RTLD_NEXT, "rdma_resolve_addr");
	const char *gate = getenv("SOFTRDMA_TEST_CMGATE");
	const char *at = getenv("SOFTRDMA_TEST_CMGATE_CALL");
	if (gate && ++calls == (at ? atoi(at) : 2)) {
		char wait[4096], go[4096];
		snprintf(wait, sizeof(wait), "%s.wait", gate);
		snprintf(go, sizeof(go), "%s.go", gate);
		int fd = open(wait, O_CREAT | O_WRONLY, 0644);
		if (fd >= 0)
			close(fd);
		while (access(go, F_OK) != 0)
			usleep(10000);
	}
	return real(id, src_addr, dst_addr, timeout_ms);
}

/*
 * The server's side, for a client in a guest gated the same way: after its
 * rdma_listen number SOFTRDMA_TEST_CMGATE_LISTEN (default 2: the test
 * connection's listen) has succeeded, it creates the file
 * $SOFTRDMA_TEST_CMGATE_LISTENED (the client's .go file, seen by the guest in
 * its /ctl directory).
 */
int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	static int calls;
	int (*real)(struct rdma_cm_id *, int) = (int (*)(struct rdma_cm_id *, int))dlsym(RTLD_NEXT, "rdma_listen");
	int rc = real(id, backlog);
	const char *mark = getenv("SOFTRDMA_TEST_CMGATE_LISTENED");
	const char *at = getenv("SOFTRDMA_TEST_CMGATE_LISTEN");
	if (rc == 0 && mark && ++calls == (at ? atoi(at) : 2)) {
		int fd = open(mark, O_CREAT | O_WRONLY, 0644);
		if (fd >= 0)
			close(fd);
	}
	return rc;
}

/*
 * The server's teardown, for a perftest -R client in a guest on the kernel's
 * siw: perftest's server destroys its QPs and IDs right after the SEND that
 * ends its closing handshake, and siw (6.1's siw_qp_sq_proc_tx, still
 * upstream) fails a SEND whose last FPDU it has already written to TCP, with
 * IBV_WC_LOC_QP_OP_ERR ("Bad wc status 2"), when the peer's FIN is processed
 * before its transmit path returns: it tests tx_suspend, which the FIN's
 * state change sets, before it tests for the last segment. The peer had
 * received that SEND and answered it. Under load (a preempted guest) the
 * window is milliseconds wide. So, when SOFTRDMA_TEST_CMGATE_CLOSE is set,
 * the first ibv_destroy_qp or rdma_destroy_qp (the first teardown perftest's
 * server makes: its listener's destruction during the setup is an
 * rdma_destroy_id) creates $SOFTRDMA_TEST_CMGATE_CLOSE.wait and waits until
 * the test, its client having ended, creates $SOFTRDMA_TEST_CMGATE_CLOSE.
 */
static void hold_teardown(void)
{
	static int held;
	const char *hold = getenv("SOFTRDMA_TEST_CMGATE_CLOSE");
	if (!hold || held)
		return;
	held = 1;
	char wait[4096];
	snprintf(wait, sizeof(wait), "%s.wait", hold);
	int fd = open(wait, O_CREAT | O_WRONLY, 0644);
	if (fd >= 0)
		close(fd);
	while (access(hold, F_OK) != 0)
		usleep(10000);
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	int (*real)(struct ibv_qp *) = (int (*)(struct ibv_qp *))dlsym(RTLD_NEXT, "ibv_destroy_qp");
	hold_teardown();
	return real(qp);
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	void (*real)(struct rdma_cm_id *) = (void (*)(struct rdma_cm_id *))dlsym(RTLD_NEXT, "rdma_destroy_qp");
	hold_teardown();
	real(id);
}
