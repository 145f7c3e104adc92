package verbsdev_test

import (
	"testing"
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
