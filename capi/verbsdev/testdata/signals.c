/* signals: a program that installs a SIGALRM handler without SA_ONSTACK (as
 * perftest does for -D) and takes an interval timer's signals while it uses
 * the library, the engine's threads running. It prints, for every thread but
 * the main one (the Go runtime's), whether the asynchronous signals are
 * blocked there, so that the kernel never runs the handler on a Go thread;
 * then whether it took alarms while polling a CQ (mostly inside the library's
 * Go code), and how many of them ran off the main thread's own stack (on a
 * goroutine stack, where the signal frame overwrites Go memory; the
 * alternate signal stack the Go runtime gives a thread that calls into it is
 * fine).
 *
 * Its argument says how the handler is installed: "late" (default) with
 * signal() once the library runs, "early" with sigaction() before the first
 * verb, "none" not at all (and no timer). Then it counts the library's
 * pthread_sigmask calls (this program defines pthread_sigmask; it is linked
 * -rdynamic, so the library's calls come here) over 100 ibv_query_device:
 * the library blocks the signals around its calls into Go only when a
 * handler without SA_ONSTACK exists (two system calls per verb saved); and
 * the same for librdmacm over 50 rdma_create_id and rdma_destroy_id. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static volatile sig_atomic_t alarms, offstack;
static uintptr_t stack_lo, stack_hi;

static void on_alarm(int sig)
{
	char buf[512]; /* a handler with a frame of some size, as real ones have */
	memset(buf, sig, sizeof(buf));
	alarms += buf[7] == sig;
	uintptr_t here = (uintptr_t)buf;
	stack_t ss;
	if ((here < stack_lo || here >= stack_hi) && !(sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK)))
		offstack++;
}

static int blocks; /* pthread_sigmask calls that block signals */

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	static int (*next)(int, const sigset_t *, sigset_t *);
	if (!next)
		next = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "pthread_sigmask");
	if (set && how == SIG_BLOCK)
		__atomic_add_fetch(&blocks, 1, __ATOMIC_RELAXED);
	return next(how, set, old);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "late";
	if (!strcmp(mode, "early")) {
		struct sigaction sa = {.sa_handler = on_alarm};
		sigaction(SIGALRM, &sa, NULL);
	}
	pthread_attr_t attr;
	void *lo;
	size_t size;
	pthread_getattr_np(pthread_self(), &attr);
	pthread_attr_getstack(&attr, &lo, &size);
	stack_lo = (uintptr_t)lo;
	stack_hi = stack_lo + size;
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		return 1;
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return 1;
	/* Installed once the library runs, as perftest does for -D: the Go
	 * runtime adds SA_ONSTACK to the handlers it finds when it starts (at
	 * the first verb), not to those installed after. */
	if (!strcmp(mode, "late"))
		signal(SIGALRM, on_alarm);
	/* Not SIGCHLD, SIGPROF or SIGURG: the Go runtime unblocks those on its
	 * threads whatever the mask it started with (_SigUnblock). */
	const int sigs[] = {SIGALRM, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGIO, SIGVTALRM};
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int others = 0, bad = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || atoi(e->d_name) == getpid())
			continue;
		char p[300], line[256];
		snprintf(p, sizeof p, "/proc/self/task/%s/status", e->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f))
			if (!strncmp(line, "SigBlk:", 7)) {
				unsigned long long m = strtoull(line + 8, NULL, 16);
				others++;
				for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
					if (!((m >> (sigs[i] - 1)) & 1)) {
						printf("thread %s: signal %d not blocked\n", e->d_name, sigs[i]);
						bad++;
					}
			}
		fclose(f);
	}
	closedir(d);
	printf("threads besides main: %d, unblocked: %d\n", others, bad);
	struct itimerval it = {.it_interval = {0, 200}, .it_value = {0, 200}};
	if (strcmp(mode, "none"))
		setitimer(ITIMER_REAL, &it, NULL);
	struct ibv_wc wc[4];
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		ibv_poll_cq(cq, 4, wc);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 500000000L);
	struct itimerval off = {0};
	setitimer(ITIMER_REAL, &off, NULL);
	printf("alarms: %s, off the thread's stack: %d\n", alarms > 0 ? "taken" : "none", (int)offstack);
	struct ibv_device_attr da;
	int before = __atomic_load_n(&blocks, __ATOMIC_RELAXED);
	for (int i = 0; i < 100; i++)
		ibv_query_device(ctx, &da);
	printf("signals blocked in 100 ibv_query_device: %d times\n", __atomic_load_n(&blocks, __ATOMIC_RELAXED) - before);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 1;
	rdma_destroy_id(id);
	before = __atomic_load_n(&blocks, __ATOMIC_RELAXED);
	for (int i = 0; i < 50; i++) {
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			return 1;
		rdma_destroy_id(id);
	}
	int n = __atomic_load_n(&blocks, __ATOMIC_RELAXED) - before;
	printf("signals blocked in 50 rdma_create_id and rdma_destroy_id: %s\n", n == 0 ? "never" : n >= 100 ? "each call" : "some");
	rdma_destroy_event_channel(ch);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	return 0;
}
