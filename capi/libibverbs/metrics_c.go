//go:build cgo

package main

/*
#include "srexit.h"

extern void srgo_dump_counters(void);

// SOFTRDMA_COUNTERS_DUMP's counters (metrics.go) are written by a destructor
// (srexit.h): only when the variable is set, with the asynchronous signals
// blocked.
__attribute__((destructor)) static void sr_dump_counters(void)
{
	sr_exit_call("SOFTRDMA_COUNTERS_DUMP", srgo_dump_counters);
}
*/
import "C"
