package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestDestroyIDEvents (testdata/cmdestroy.c): rdma_destroy_id keeps
// rdma-core's contract with the events of the ID (librdmacm/cma.c): with an
// event taken by rdma_get_cm_event and not acknowledged it waits for the
// rdma_ack_cm_event (the event's ID stays the program's until then), events
// still queued go with the ID and are never returned, and acknowledged ones
// hold nothing. The channel's fd is readable exactly when an event is
// queued: after a destroy dropped the only event, and on the old channel
// after rdma_migrate_id moved it, poll says not readable. Over both
// transports.
func TestDestroyIDEvents(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmdestroy")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := run(t, lib, tr+":"+addr, prog, addr)
			if err != nil || out != "ok\n" {
				t.Fatalf("cmdestroy: %v\n%s%s", err, out, errOut)
			}
		})
	}
}

// TestDestroyIDRace (testdata/cmrace.c): one thread destroys an ID while
// another takes its event, 300 rounds over each transport; the process goes
// on whichever wins. rdma_get_cm_event's refresh of the event's ID came after
// the destroy had deleted the ID's handle, and the Go side panicked ("misuse
// of an invalid Handle", rping's CM thread at its end, issue 20); now the
// refresh fails with EINVAL and the event is still returned. Then 30 rounds
// of rping's end: the channel a thread waits on is destroyed just after an
// event woke the thread and went with its ID; the thread returned EINVAL
// (rping exits 255 on it: TestRpingFlags "roce -q" failed so once), and now
// waits on, as with rdma-core.
func TestDestroyIDRace(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmrace")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := runBounded(t, lib, tr+":"+addr, 2*time.Minute, prog, addr, "300")
			if err != nil || !strings.HasPrefix(out, "ok: ") {
				t.Fatalf("cmrace: %v\n%s%s", err, out, errOut)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
}

// TestMigrateIDEvents (testdata/cmmigrate.c): rdma_migrate_id keeps
// rdma-core's contract with the events of the ID (librdmacm/cma.c and the
// kernel's ucma_migrate_id): the queued events move to the new channel at
// once (a listener's connection requests too, their connections with them),
// the call returns only once the events the program took are acknowledged
// (one thread migrates while the main thread holds an event), later events
// reach the new channel, and a synchronous ID cannot move to no channel
// (EINVAL). One process connects to itself, over both transports.
func TestMigrateIDEvents(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmmigrate")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := runBounded(t, lib, tr+":"+addr, time.Minute, prog, addr, fmt.Sprint(20000+rand.IntN(20000)))
			if err != nil || out != "ok\n" {
				t.Fatalf("cmmigrate: %v\n%s%s", err, out, errOut)
			}
		})
	}
}

// TestECENotify (testdata/cmece.c): rdma_set_local_ece, rdma_get_remote_ece,
// rdma_reject_ece and rdma_notify answer as rdma-core's librdmacm over the
// kernel's rdma_cm on a device without ECE (rxe, siw): the ECE values are
// kept in user space with rdma-core's EINVAL checks and the peer's are zero,
// reject_ece's REJECTED has status 35 over RoCE, and rdma_notify answers as
// the kernel's rdma_notify before and after the connection is established.
// They returned ENOSYS. Over both transports.
func TestECENotify(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmece")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := runBounded(t, lib, tr+":"+addr, time.Minute, prog, tr, addr, fmt.Sprint(20000+rand.IntN(20000)))
			if err != nil || out != "ok\n" {
				t.Fatalf("cmece: %v\n%s%s", err, out, errOut)
			}
		})
	}
}
