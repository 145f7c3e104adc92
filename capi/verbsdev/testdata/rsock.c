/*
 * rsock: rsockets stream checks between two processes (TestRsocketCalls).
 *
 *   rsock -b ADDR -p PORT   the server: accepts one connection, reads N bytes
 *                           and checks them, sends them back, reads until EOF
 *                           (the client's rshutdown(SHUT_WR)), sends "bye"
 *                           and rcloses while the client reads
 *   rsock -s ADDR -p PORT   the client: a non-blocking rconnect (EINPROGRESS,
 *                           then rpoll POLLOUT and SO_ERROR 0), N bytes out and
 *                           back with rpoll, rshutdown(SHUT_WR), then waits
 *                           in rselect and reads "bye" and 0 (EOF) after the
 *                           server's rclose
 *
 * Then a second connection on the same listener: a blocking rconnect and
 * raccept, one byte, EOF after the server's rclose.
 *
 * N (300000) is more than the receive buffer the sockets ask for (SO_RCVBUF
 * 32768: 64 KiB), so the credits and the buffer's wrap are crossed. Each
 * check prints "ok: ..."; a failure prints "FAIL: ..." and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/select.h>
#include <rdma/rsocket.h>

#define N 300000

static void fail(const char *what)
{
	printf("FAIL: %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static void ok(const char *what)
{
	printf("ok: %s\n", what);
	fflush(stdout);
}

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 7 + i / 251);
}

/* waitfor polls fd for ev, up to 20 s, and returns the revents. */
static short waitfor(int fd, short ev)
{
	struct pollfd p = {.fd = fd, .events = ev};
	int rc = rpoll(&p, 1, 20000);
	if (rc < 0)
		fail("rpoll");
	if (rc == 0) {
		errno = ETIMEDOUT;
		fail("rpoll: nothing in 20 s");
	}
	return p.revents;
}

/* xfer moves n bytes through fd: out or in, waiting in rpoll when the
 * socket says EAGAIN (non-blocking) or with blocking calls. */
static void xfer(int fd, unsigned char *buf, size_t n, int out, int nonblock)
{
	size_t off = 0;
	while (off < n) {
		ssize_t k = out ? rsend(fd, buf + off, n - off, 0) : rrecv(fd, buf + off, n - off, 0);
		if (k > 0) {
			off += k;
			continue;
		}
		if (k == 0) {
			errno = ECONNRESET;
			fail(out ? "rsend returned 0" : "rrecv: EOF before the end");
		}
		if (!nonblock || (errno != EAGAIN && errno != EWOULDBLOCK))
			fail(out ? "rsend" : "rrecv");
		waitfor(fd, out ? POLLOUT : POLLIN);
	}
}

static void setbuf_small(int fd)
{
	int v = 32768;
	if (rsetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) || rsetsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)))
		fail("rsetsockopt SO_RCVBUF/SO_SNDBUF");
}

static struct addrinfo *resolve(const char *addr, const char *port)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
	struct addrinfo *ai;
	if (getaddrinfo(addr, port, &hints, &ai)) {
		errno = EINVAL;
		fail("getaddrinfo");
	}
	return ai;
}

static unsigned char buf[N];

static int server(const char *addr, const char *port)
{
	struct addrinfo *ai = resolve(addr, port);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		fail("rsocket");
	int one = 1;
	if (rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		fail("rsetsockopt SO_REUSEADDR");
	setbuf_small(l);
	if (rbind(l, ai->ai_addr, ai->ai_addrlen) || rlisten(l, 4))
		fail("rbind/rlisten");
	freeaddrinfo(ai);
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	int fd = raccept(l, (struct sockaddr *)&peer, &plen);
	if (fd < 0)
		fail("raccept");
	if (peer.ss_family != AF_INET || plen != sizeof(struct sockaddr_in)) {
		errno = EINVAL;
		fail("raccept: the peer's address");
	}
	ok("accepted");

	xfer(fd, buf, N, 0, 0);
	for (size_t i = 0; i < N; i++)
		if (buf[i] != pattern(i)) {
			errno = EILSEQ;
			fail("the data received");
		}
	ok("server received 300000 bytes intact");
	xfer(fd, buf, N, 1, 0);

	char c;
	ssize_t k = rrecv(fd, &c, 1, 0);
	if (k != 0) {
		if (k > 0)
			errno = EPROTO;
		fail("rrecv after the client's rshutdown(SHUT_WR): not EOF");
	}
	ok("server sees EOF after the client's rshutdown(SHUT_WR)");
	if (rsend(fd, "bye", 3, 0) != 3)
		fail("rsend after the peer's SHUT_WR");
	if (rclose(fd))
		fail("rclose");
	ok("server closed");

	/* A second connection on the same listener, blocking calls. */
	fd = raccept(l, NULL, NULL);
	if (fd < 0)
		fail("the second raccept");
	if (rrecv(fd, &c, 1, MSG_WAITALL) != 1 || c != 'z')
		fail("the second connection's byte");
	if (rclose(fd) || rclose(l))
		fail("rclose of the second connection and the listener");
	ok("server: second connection on the same listener");
	return 0;
}

static int client(const char *addr, const char *port)
{
	struct addrinfo *ai = resolve(addr, port);
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		fail("rsocket");
	setbuf_small(fd);
	if (rfcntl(fd, F_SETFL, O_NONBLOCK) || !(rfcntl(fd, F_GETFL) & O_NONBLOCK))
		fail("rfcntl O_NONBLOCK");
	if (rconnect(fd, ai->ai_addr, ai->ai_addrlen) != -1 || errno != EINPROGRESS) {
		if (!errno)
			errno = EPROTO;
		fail("non-blocking rconnect: not EINPROGRESS");
	}
	freeaddrinfo(ai);
	ok("rconnect: EINPROGRESS");
	short rev = waitfor(fd, POLLOUT);
	if (!(rev & POLLOUT) || (rev & (POLLERR | POLLHUP))) {
		errno = EPROTO;
		fail("rpoll POLLOUT after rconnect");
	}
	int err = -1;
	socklen_t len = sizeof(err);
	if (rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		errno = err > 0 ? err : EPROTO;
		fail("SO_ERROR after the connection");
	}
	ok("connected: rpoll POLLOUT, SO_ERROR 0");
	char c;
	if (rrecv(fd, &c, 1, 0) != -1 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
		errno = EPROTO;
		fail("rrecv with nothing there: not EAGAIN");
	}
	ok("rrecv with nothing there: EAGAIN");

	for (size_t i = 0; i < N; i++)
		buf[i] = pattern(i);
	xfer(fd, buf, N, 1, 1);
	memset(buf, 0, N);
	xfer(fd, buf, N, 0, 1);
	for (size_t i = 0; i < N; i++)
		if (buf[i] != pattern(i)) {
			errno = EILSEQ;
			fail("the data echoed");
		}
	ok("client got its 300000 bytes back");

	if (rshutdown(fd, SHUT_WR))
		fail("rshutdown SHUT_WR");
	if (rsend(fd, "x", 1, 0) != -1) {
		errno = EPROTO;
		fail("rsend after SHUT_WR succeeded");
	}
	ok("rsend after SHUT_WR fails");
	if (rfcntl(fd, F_SETFL, 0))
		fail("rfcntl 0");
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(fd, &rd);
	struct timeval tv = {.tv_sec = 20};
	if (rselect(fd + 1, &rd, NULL, NULL, &tv) != 1 || !FD_ISSET(fd, &rd)) {
		if (!errno)
			errno = ETIMEDOUT;
		fail("rselect for the server's bye");
	}
	ok("rselect: readable");
	char b[8];
	size_t got = 0;
	while (got < 3) {
		ssize_t k = rrecv(fd, b + got, sizeof(b) - got, 0);
		if (k <= 0)
			fail("rrecv of bye");
		got += k;
	}
	if (got != 3 || memcmp(b, "bye", 3)) {
		errno = EPROTO;
		fail("not bye");
	}
	ssize_t k = rrecv(fd, b, sizeof(b), 0);
	if (k != 0) {
		if (k > 0)
			errno = EPROTO;
		fail("rrecv after the server's rclose: not EOF");
	}
	ok("client reads bye, then EOF after the server's rclose");
	if (rclose(fd))
		fail("rclose");

	/* A second connection: a blocking rconnect, one byte. */
	ai = resolve(addr, port);
	fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || rconnect(fd, ai->ai_addr, ai->ai_addrlen))
		fail("the second, blocking rconnect");
	freeaddrinfo(ai);
	if (rsend(fd, "z", 1, 0) != 1)
		fail("rsend on the second connection");
	if (rrecv(fd, b, 1, 0) != 0)
		fail("the second connection: not EOF after the server's rclose");
	if (rclose(fd))
		fail("rclose of the second connection");
	ok("client: second connection, blocking rconnect");
	return 0;
}

int main(int argc, char **argv)
{
	const char *srv = NULL, *bind = NULL, *port = "7471";
	int op;
	while ((op = getopt(argc, argv, "s:b:p:")) != -1) {
		switch (op) {
		case 's':
			srv = optarg;
			break;
		case 'b':
			bind = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		default:
			return 2;
		}
	}
	if (srv)
		return client(srv, port);
	if (bind)
		return server(bind, port);
	return 2;
}
