/*
 * At-exit calls into Go. The Go side cannot see exit(), so what must happen
 * when a program exits (SOFTRDMA_COUNTERS_DUMP's counters, SOFTRDMA_PCAP's
 * files, SOFTRDMA_CPUPROFILE's profile) is done by a C destructor that calls
 * an exported Go function. sr_exit_call is that destructor's body, written once.
 */
#ifndef SREXIT_H
#define SREXIT_H

#include <signal.h>
#include <pthread.h>
#include <stdlib.h>

/*
 * sr_async_signals fills s with every signal but the synchronous ones (a
 * fault, a trap, a bad system call), which must reach the thread that caused
 * them: the set blocked around every call into Go.
 */
static inline void sr_async_signals(sigset_t *s)
{
	sigfillset(s);
	sigdelset(s, SIGSEGV);
	sigdelset(s, SIGBUS);
	sigdelset(s, SIGFPE);
	sigdelset(s, SIGILL);
	sigdelset(s, SIGTRAP);
	sigdelset(s, SIGSYS);
}

/*
 * sr_exit_call calls the Go function f with sr_async_signals blocked,
 * as around every call into Go (SRGO in verbs_c.go). With env non-NULL it
 * calls f only when that environment variable is set and not empty: without
 * the variable it does not call into Go at all (a forked child that exits,
 * say, has a Go runtime without its threads). With env NULL it always calls f.
 */
static inline void sr_exit_call(const char *env, void (*f)(void))
{
	if (env) {
		const char *v = getenv(env);
		if (!v || !*v)
			return;
	}
	sigset_t s, old;
	sr_async_signals(&s);
	pthread_sigmask(SIG_BLOCK, &s, &old);
	f();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

#endif
