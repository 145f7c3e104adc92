package main

import (
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/internal/syncbuf"
)

// TestConformServeDefaults: conform serve listens on loopback unless --listen
// says otherwise, and holds each session to --max-session-memory (default 256
// MiB), refusing a reg_mr beyond it with an error the tester sees (issue 19:
// it listened on every interface, and a session could register without
// limit).
func TestConformServeDefaults(t *testing.T) {
	o, err := conformServeParse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if ap, err := netip.ParseAddrPort(o.Listen); err != nil || !ap.Addr().IsLoopback() || ap.Port() != conform.DefaultControlPort {
		t.Errorf("default --listen %q, want 127.0.0.1:%d", o.Listen, conform.DefaultControlPort)
	}
	if o.maxSessionMemory != 256<<20 {
		t.Errorf("default --max-session-memory %d, want 256 MiB", o.maxSessionMemory)
	}
	for _, c := range []struct {
		arg  string
		want byteSize
	}{{"1K", 1 << 10}, {"3M", 3 << 20}, {"2G", 2 << 30}, {"4096", 4096}} {
		o, err := conformServeParse([]string{"--max-session-memory", c.arg}, io.Discard)
		if err != nil || o.maxSessionMemory != c.want {
			t.Errorf("--max-session-memory %s: %d, %v; want %d", c.arg, o.maxSessionMemory, err, c.want)
		}
	}
	for _, bad := range []string{"0", "-1", "12Q", "1.5M", "9999999999G"} {
		if _, err := conformServeParse([]string{"--max-session-memory", bad}, io.Discard); err == nil {
			t.Errorf("--max-session-memory %s accepted", bad)
		}
	}

	o, err = conformServeParse([]string{"--addr", "127.0.83.9", "--listen", "127.0.83.9:0", "--max-session-memory", "1M"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var srvOut, srvErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- conformServe(ctx, o, &srvOut, &srvErr) }()
	defer func() {
		cancel()
		<-done
	}()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := conformServeAddrRE.FindStringSubmatch(srvOut.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("conform serve did not start:\n%s%s", srvOut.String(), srvErr.String())
	}
	c, err := conform.DialControl(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.RegMR(ctx, conform.MRSpec{Length: 1 << 20}); err != nil {
		t.Fatalf("reg_mr of the whole limit: %v", err)
	}
	if _, err := c.RegMR(ctx, conform.MRSpec{Length: 1}); err == nil || !strings.Contains(err.Error(), "session memory limit") {
		t.Errorf("reg_mr past --max-session-memory 1M: %v, want the session memory limit", err)
	}
}
