package main

/*
extern void sr_cm_arm_exit(void);
*/
import "C"

import "github.com/softrdma/softrdma/rdmacm"

// cmExitArm makes the process's exit destroy the rdma_cm IDs it leaves
// (srgo_cm_exit); cmManager calls it once.
func cmExitArm() { C.sr_cm_arm_exit() }

// srgo_cm_exit destroys, when the process exits, the RoCE rdma_cm IDs it has
// not destroyed, and sends what that queued, as the kernel does when a process
// exits (ucma_close destroys each ID: a connection gets its DREQ, a DREQ
// received its DREP, a request its REJ). The kernel's CM outlives the
// process; this CM does not, and a peer whose DREQ was not answered waits out
// its DREQ retries (a minute and more) for its DISCONNECTED event. qperf's
// server does that: it destroys its listening ID but not the connection's
// and exits, and its client waits for the DISCONNECTED event of the
// rdma_disconnect it made. It does nothing if another thread holds the CM's
// lock (the exit must not wait for it).
//
//export srgo_cm_exit
func srgo_cm_exit() {
	if !cm.mu.TryLock() {
		debugf("exit: rdma_cm busy: its IDs are left as they are")
		return
	}
	var live []*rdmacm.ID
	for id, w := range idsByEngine {
		// RoCE's only: an iWARP connection is the process's TCP socket, which
		// the kernel closes at exit as it did before this destructor (an ID's
		// Destroy would abort it instead).
		if !w.dead && id.Transport() != rdmacm.TransportIWARP {
			w.dead = true
			live = append(live, id)
		}
	}
	cm.mu.Unlock()
	if len(live) == 0 {
		return
	}
	for _, id := range live {
		id.Destroy()
	}
	engines.mu.Lock()
	es := make([]*engine, 0, len(engines.m))
	for _, e := range engines.m {
		es = append(es, e)
	}
	engines.mu.Unlock()
	for _, e := range es {
		e.flush()
	}
	srgo_flush_captures() // SOFTRDMA_PCAP's files hold what went out (pcap.go)
}
