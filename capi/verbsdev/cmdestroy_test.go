package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDestroyIDEvents (testdata/cmdestroy.c): rdma_destroy_id keeps
// rdma-core's contract with the events of the ID (librdmacm/cma.c): with an
// event taken by rdma_get_cm_event and not acknowledged it waits for the
// rdma_ack_cm_event (the event's ID stays the program's until then), events
// still queued go with the ID and are never returned, and acknowledged ones
// hold nothing. Over both transports.
func TestDestroyIDEvents(t *testing.T) {
	lib := buildLib(t)
	prog := filepath.Join(t.TempDir(), "cmdestroy")
	if o, err := exec.Command("gcc", "-Wall", "-pthread", "-o", prog, "testdata/cmdestroy.c",
		filepath.Join(lib, "librdmacm.so.1"), filepath.Join(lib, "libibverbs.so.1")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := fmt.Sprintf("127.%d.%d.1", 100+rand.IntN(100), 1+rand.IntN(250))
			out, errOut, err := run(t, lib, tr+":"+addr, prog, addr)
			if err != nil || out != "ok\n" {
				t.Fatalf("cmdestroy: %v\n%s%s", err, out, errOut)
			}
		})
	}
}
