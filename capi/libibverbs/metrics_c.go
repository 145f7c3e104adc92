//go:build cgo

package main

/*
#include <signal.h>
#include <pthread.h>
#include <stdlib.h>

extern void srgo_dump_counters(void);

// SOFTRDMA_COUNTERS_DUMP's counters (metrics.go) are written by a destructor:
// the Go side cannot see exit(). The asynchronous signals are blocked as
// around every call into Go (SRGO in verbs_c.go), as prof_c.go does.
// Without the variable it does not call into Go at all (a forked child
// that exits, say, has a Go runtime without its threads).
__attribute__((destructor)) static void sr_dump_counters(void)
{
	const char *v = getenv("SOFTRDMA_COUNTERS_DUMP");
	if (!v || !*v)
		return;
	sigset_t s, old;
	sigfillset(&s);
	sigdelset(&s, SIGSEGV);
	sigdelset(&s, SIGBUS);
	sigdelset(&s, SIGFPE);
	sigdelset(&s, SIGILL);
	sigdelset(&s, SIGTRAP);
	sigdelset(&s, SIGSYS);
	pthread_sigmask(SIG_BLOCK, &s, &old);
	srgo_dump_counters();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}
*/
import "C"
