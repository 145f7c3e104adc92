/* checks.h, shared by the C test programs that check answers one by one
 * (badcalls, hostile): one line per check on stdout, "ok NAME: GOT" or
 * "BAD NAME: got GOT want WANT"; before each call a line "== NAME" on stderr,
 * with " (allowed)" when the call is expected to succeed, so that a test can
 * see that every refused verb said why under SOFTRDMA_DEBUG=1. */
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <infiniband/verbs.h>

static int bad, total;

static void mark(const char *name, int refused)
{
	fprintf(stderr, "== %s%s\n", name, refused ? "" : " (allowed)");
	fflush(stderr);
}

static void expect(const char *name, long got, long want)
{
	total++;
	if (got == want) {
		printf("ok %s: %ld\n", name, got);
	} else {
		bad++;
		printf("BAD %s: got %ld want %ld\n", name, got, want);
	}
	fflush(stdout);
}

/* RC(name, want, call): a verb that returns an errno (0 on success), which
 * rc_last keeps. */
static int rc_last __attribute__((unused));
#define RC(name, want, call)                                                                      \
	do {                                                                                      \
		mark(name, (want) != 0);                                                          \
		rc_last = (call);                                                                 \
		expect(name, rc_last, want);                                                      \
	} while (0)

/* OBJ(name, want_errno, call): a verb that returns an object or NULL and errno;
 * the object, if any, is left in obj_. */
static void *obj_ __attribute__((unused));
#define OBJ(name, want, call)                                                                     \
	do {                                                                                      \
		mark(name, (want) != 0);                                                          \
		errno = 0;                                                                        \
		obj_ = (void *)(call);                                                            \
		expect(name, obj_ ? 0 : errno, want);                                             \
	} while (0)

/* poll1 waits (bounded) for one completion on c and returns its status, or -1. */
__attribute__((unused)) static int poll1(struct ibv_cq *c, struct ibv_wc *wc)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(c, 1, wc);
		if (n < 0)
			return -2;
		if (n == 1)
			return wc->status;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 20)
			return -1;
	}
}

