package main

/*
#include "srexit.h"

extern void srgo_stop_profile(void);

// The Go side cannot see exit(): a destructor (srexit.h) stops
// SOFTRDMA_CPUPROFILE's profile (prof.go), with the asynchronous signals
// blocked. It calls into Go whether or not the variable is set, as before.
__attribute__((destructor)) static void sr_stop_profile(void)
{
	sr_exit_call(NULL, srgo_stop_profile);
}
*/
import "C"
