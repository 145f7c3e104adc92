package main

/*
#include <sys/types.h>
#include <unistd.h>
#include "srexit.h"

extern void srgo_cm_exit(void);

// sr_cm_pid is the process whose rdma_cm IDs the library runs, set when its
// first rdma_cm call makes the manager (cm_exit.go); 0 before. A forked child
// of that process (a Go runtime without its threads) does not call into Go
// when it exits.
static pid_t sr_cm_pid;

void sr_cm_arm_exit(void) { sr_cm_pid = getpid(); }

// At exit the kernel's rdma_cm destroys the IDs a process left (closing
// /dev/infiniband/rdma_cm): so does this destructor (srgo_cm_exit).
__attribute__((destructor)) static void sr_cm_exit(void)
{
	if (sr_cm_pid && sr_cm_pid == getpid())
		sr_exit_call(NULL, srgo_cm_exit);
}
*/
import "C"
