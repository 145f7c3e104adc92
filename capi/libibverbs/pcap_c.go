//go:build cgo

package main

/*
#include <signal.h>
#include <pthread.h>
#include <stdlib.h>

extern void srgo_flush_captures(void);

// SOFTRDMA_PCAP's files (pcap.go) are flushed by a destructor, as
// SOFTRDMA_COUNTERS_DUMP's counters are written (metrics_c.go): the Go side
// cannot see exit(). Without the variable it does not call into Go.
__attribute__((destructor)) static void sr_flush_captures(void)
{
	const char *v = getenv("SOFTRDMA_PCAP");
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
	srgo_flush_captures();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}
*/
import "C"
