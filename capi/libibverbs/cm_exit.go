package main

/*
extern void sr_cm_arm_exit(void);
*/
import "C"

import (
	"sync"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
)

// cmExitWait bounds how long the exit waits for the CM's lock.
const cmExitWait = time.Second

// lockWithin locks mu unless it stays held for d, trying every millisecond;
// it says whether it locked it.
func lockWithin(mu *sync.Mutex, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !mu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

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
// rdma_disconnect it made. The lock's holders keep it only to move an event,
// but one can hold it as the process exits: the forwarder of the DREQ a peer
// sends once it has this process's last message (perftest's atomic_lat
// server exits then; TryLock alone failed in 2 runs of 6 and the client
// waited out its DREQ's retries). So the exit waits for the lock up to
// cmExitWait, and leaves the IDs as they are if it is still held.
//
//export srgo_cm_exit
func srgo_cm_exit() {
	if !lockWithin(&cm.mu, cmExitWait) {
		debugf("exit: rdma_cm busy for %v: its IDs are left as they are", cmExitWait)
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
