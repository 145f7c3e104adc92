//go:build cgo

package main

/*
#include "srexit.h"

extern void srgo_flush_captures(void);

// SOFTRDMA_PCAP's files (pcap.go) are flushed by a destructor (srexit.h),
// as SOFTRDMA_COUNTERS_DUMP's counters are written (metrics_c.go): only when
// the variable is set, with the asynchronous signals blocked.
__attribute__((destructor)) static void sr_flush_captures(void)
{
	sr_exit_call("SOFTRDMA_PCAP", srgo_flush_captures);
}
*/
import "C"
