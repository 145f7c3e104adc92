package main

/*
#include <signal.h>
#include <pthread.h>

extern void srgo_stop_profile(void);

// The Go side cannot see exit(): a destructor stops SOFTRDMA_CPUPROFILE's
// profile (prof.go), with the asynchronous signals blocked as around every
// call into Go (SRGO in verbs_c.go).
__attribute__((destructor)) static void sr_stop_profile(void)
{
	sigset_t s, old;
	sigfillset(&s);
	sigdelset(&s, SIGSEGV);
	sigdelset(&s, SIGBUS);
	sigdelset(&s, SIGFPE);
	sigdelset(&s, SIGILL);
	sigdelset(&s, SIGTRAP);
	sigdelset(&s, SIGSYS);
	pthread_sigmask(SIG_BLOCK, &s, &old);
	srgo_stop_profile();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}
*/
import "C"
