package conform

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

// TestSessionMemoryLimit: the regions one session holds are bounded by
// Server.MaxSessionMemory (issue 19: 40 reg_mr calls of 16 MiB took the
// server to 674 MB). A reg_mr beyond the limit is answered with an error that
// says so, the session stays usable, reset frees its share, and another
// session has its own.
func TestSessionMemoryLimit(t *testing.T) {
	if got := (&Server{}).maxSessionMemory(); got != DefaultMaxSessionMemory || DefaultMaxSessionMemory != 256<<20 {
		t.Errorf("default limit %d, want 256 MiB", got)
	}
	const limit = 1 << 20
	s := newSelf(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer l.Close()
	go (&Server{Device: s.Device, MaxSessionMemory: limit}).Serve(l)
	ctx := context.Background()
	dial := func() *Client {
		c, err := DialControl(ctx, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dial()
	for i := range 4 {
		if _, err := c.RegMR(ctx, MRSpec{Length: limit / 4}); err != nil {
			t.Fatalf("reg_mr %d of a quarter of the limit: %v", i, err)
		}
	}
	var re *RemoteError
	_, err = c.RegMR(ctx, MRSpec{Length: 1})
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "session memory limit") || !strings.Contains(err.Error(), "at most 1048576") {
		t.Fatalf("reg_mr past the limit: %v, want a RemoteError naming the session memory limit of 1048576", err)
	}
	if _, err := c.Hello(ctx); err != nil {
		t.Fatalf("the session after the refusal: %v", err)
	}
	other := dial()
	if _, err := other.RegMR(ctx, MRSpec{Length: limit}); err != nil {
		t.Errorf("another session's reg_mr of the whole limit: %v", err)
	}
	if err := c.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegMR(ctx, MRSpec{Length: limit}); err != nil {
		t.Errorf("reg_mr of the whole limit after reset: %v", err)
	}
}
