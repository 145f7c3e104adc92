//go:build linux

package main

import (
	"bytes"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/netio/netnstest"
)

// TestRpingRoCESharedInterface runs softrdma rping --transport roce in a
// network namespace of its own with 10.9.0.1/24 and 10.9.0.2/24 on lo: the
// server on one address (-a), the client told only the server's address,
// each way. The client's device is lo's, its socket bound to one address
// and its GID table all of lo's; its rdma_cm source must be the address the
// socket sends from. With every address of lo as the device's, rdma_cm
// took the destination as the source, the socket dropped the REQ and the
// connect timed out.
func TestRpingRoCESharedInterface(t *testing.T) {
	ns := netnstest.New(t)
	for _, p := range []string{"10.9.0.1/24", "10.9.0.2/24"} {
		if err := ns.AddAddress("lo", netip.MustParsePrefix(p)); err != nil {
			t.Fatalf("adding %s to lo in the namespace: %v", p, err)
		}
	}
	for _, server := range []string{"10.9.0.2", "10.9.0.1"} {
		t.Run("server "+server, func(t *testing.T) {
			// rping opens its device and sockets in the calling thread:
			// run each side on a thread in the namespace.
			run := func(args []string, out, errOut io.Writer) int {
				code := -1
				ns.MustDo(t, func() error {
					code = rpingCmd(args, out, errOut)
					return nil
				})
				return code
			}
			var sOut, sErr bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- run([]string{"--transport", "roce", "-s", "-a", server, "-C", "3", "--timeout", "30s"}, &sOut, &sErr)
			}()
			code, cOut, cErr := untilListening(50*time.Millisecond, []string{"REJECTED"}, func(stdout, stderr io.Writer) int {
				return run([]string{"--transport", "roce", "-c", "-a", server, "-C", "3", "-v", "-V", "--timeout", "20s"}, stdout, stderr)
			})
			if code != 0 {
				t.Fatalf("client exit %d\n%s%s", code, cOut.String(), cErr.String())
			}
			if n := strings.Count(cOut.String(), "ping data: "); n != 3 {
				t.Errorf("client printed %d pings, want 3:\n%s", n, cOut.String())
			}
			if c := <-done; c != 0 {
				t.Fatalf("server exit %d\n%s%s", c, sOut.String(), sErr.String())
			}
		})
	}
}
