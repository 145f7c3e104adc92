/* Whether the Go library must block the asynchronous signals around its calls
 * into Go (SRGO, capi/libibverbs/verbs_c.go): only when some asynchronous
 * signal has a handler function installed without SA_ONSTACK, which would run
 * on a goroutine stack and overwrite it. Blocking costs two rt_sigprocmask
 * calls per verb (about 2.3 us on a paravirtualised host), the whole gap
 * between ib_send_lat on the library and softrdma perf send_lat (issue 20).
 *
 * sr_sig_risky is that condition, sticky once set. It is set:
 *   - by the wrappers below of the libc functions a program installs handlers
 *     with (libibverbs.so.1 is ahead of libc in a program that links it, so
 *     the program's calls reach them), before the handler is installed;
 *   - by sr_sig_scan, at startup and when the Go library loads (the first
 *     verb), for handlers installed some other way (a raw syscall, a library
 *     whose calls bind inside libc);
 *   - at startup, when the wrappers are not what the process's lookup finds
 *     (libibverbs.so.1 dlopened after libc): then nothing can be seen, so the
 *     library always blocks.
 * The wrappers are unversioned (the shim's map has no "local: *"), so they
 * stand in for sigaction@GLIBC_2.2.5 or whatever version a program wants. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1: the Go library blocks the asynchronous signals around calls into Go.
 * Read by the Go library (a weak reference: without this shim it blocks). */
int sr_sig_risky;

typedef int (*sr_sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef sighandler_t (*sr_signal_fn)(int, sighandler_t);

/* The real functions, found lazily (a library's constructor may call them
 * before ours runs); concurrent finders store the same pointer. */
static void *sr_next(void **slot, const char *name)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

static void *sr_real_sigaction, *sr_real_signal, *sr_real_bsd_signal, *sr_real_sysv_signal, *sr_real_sigset,
	*sr_real_ssignal;

/* sr_sig_async: the signals SRGO blocks (srexit.h's sr_async_signals): all
 * but those a fault raises on the faulting thread. */
static int sr_sig_async(int sig)
{
	return sig > 0 && sig < NSIG && sig != SIGSEGV && sig != SIGBUS && sig != SIGFPE && sig != SIGILL &&
	       sig != SIGTRAP && sig != SIGSYS;
}

/* sr_sig_on sets sr_sig_risky, and says why under SOFTRDMA_DEBUG the first
 * time. Only write(2): it may run in a signal handler. */
static void sr_sig_on(int sig, const char *how)
{
	if (__atomic_exchange_n(&sr_sig_risky, 1, __ATOMIC_SEQ_CST))
		return;
	const char *d = getenv("SOFTRDMA_DEBUG");
	if (!d || !*d)
		return;
	char msg[256];
	const char *name = sig > 0 ? sigabbrev_np(sig) : NULL;
	int n;
	if (sig > 0)
		n = snprintf(msg, sizeof(msg),
			     "softrdma: blocking signals around calls into Go: SIG%s has a handler without "
			     "SA_ONSTACK (%s)\n",
			     name ? name : "?", how);
	else
		n = snprintf(msg, sizeof(msg), "softrdma: blocking signals around calls into Go: %s\n", how);
	if (n > 0)
		(void)!write(2, msg, n < (int)sizeof(msg) ? n : (int)sizeof(msg) - 1);
}

static int sr_handler(sighandler_t h)
{
	return h != SIG_DFL && h != SIG_IGN && h != SIG_ERR && h != SIG_HOLD;
}

static int sr_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	/* The Go runtime installs its handlers through here too (runtime/cgo),
	 * always with SA_ONSTACK. */
	if (act && sr_sig_async(sig) && !(act->sa_flags & SA_ONSTACK) &&
	    ((act->sa_flags & SA_SIGINFO) || sr_handler(act->sa_handler)))
		sr_sig_on(sig, "installed with sigaction()");
	sr_sigaction_fn f = sr_next(&sr_real_sigaction, "sigaction");
	return f(sig, act, old);
}

/* The signal() family installs without SA_ONSTACK. */
static sighandler_t sr_signal_via(void **slot, const char *name, const char *how, int sig, sighandler_t h)
{
	if (sr_sig_async(sig) && sr_handler(h))
		sr_sig_on(sig, how);
	sr_signal_fn f = sr_next(slot, name);
	return f(sig, h);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return sr_sigaction(sig, act, old);
}

int __sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return sr_sigaction(sig, act, old);
}

sighandler_t signal(int sig, sighandler_t h)
{
	return sr_signal_via(&sr_real_signal, "signal", "installed with signal()", sig, h);
}

sighandler_t ssignal(int sig, sighandler_t h)
{
	return sr_signal_via(&sr_real_ssignal, "ssignal", "installed with ssignal()", sig, h);
}

sighandler_t bsd_signal(int sig, sighandler_t h)
{
	return sr_signal_via(&sr_real_bsd_signal, "bsd_signal", "installed with bsd_signal()", sig, h);
}

sighandler_t sysv_signal(int sig, sighandler_t h)
{
	return sr_signal_via(&sr_real_sysv_signal, "sysv_signal", "installed with sysv_signal()", sig, h);
}

/* What <signal.h> calls signal() under strict standards modes. */
sighandler_t __sysv_signal(int sig, sighandler_t h)
{
	return sr_signal_via(&sr_real_sysv_signal, "sysv_signal", "installed with sysv_signal()", sig, h);
}

sighandler_t sigset(int sig, sighandler_t h)
{
	return sr_signal_via(&sr_real_sigset, "sigset", "installed with sigset()", sig, h);
}

/* sr_sig_scan sets sr_sig_risky if an asynchronous signal has a handler
 * without SA_ONSTACK now: one installed where the wrappers did not see it. */
__attribute__((visibility("hidden"))) void sr_sig_scan(const char *when)
{
	if (__atomic_load_n(&sr_sig_risky, __ATOMIC_ACQUIRE))
		return;
	sr_sigaction_fn f = sr_next(&sr_real_sigaction, "sigaction");
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction old;
		if (!sr_sig_async(sig) || f(sig, NULL, &old))
			continue;
		if (!(old.sa_flags & SA_ONSTACK) && ((old.sa_flags & SA_SIGINFO) || sr_handler(old.sa_handler))) {
			sr_sig_on(sig, when);
			return;
		}
	}
}

/* The shim's own sigaction and signal, not whatever a lookup would find. */
extern int sr_sigaction_self(int, const struct sigaction *, struct sigaction *)
	__attribute__((alias("sigaction"), visibility("hidden"), nothrow, leaf));
extern sighandler_t sr_signal_self(int, sighandler_t) __attribute__((alias("signal"), visibility("hidden"), nothrow, leaf));

/* At startup: if a lookup of sigaction or signal does not find the wrappers
 * (libibverbs.so.1 loaded after libc, by dlopen), the program's calls do not
 * reach them either, and the library must always block. */
__attribute__((constructor)) static void sr_sig_start(void)
{
	void *a = dlsym(RTLD_DEFAULT, "sigaction"), *s = dlsym(RTLD_DEFAULT, "signal");
	if (a != (void *)sr_sigaction_self || s != (void *)sr_signal_self)
		sr_sig_on(0, "libibverbs.so.1 comes after libc in the lookup order: sigaction() is not seen");
	sr_sig_scan("installed before libibverbs.so.1 started");
}
