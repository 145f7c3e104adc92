//go:build linux

package netio

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUDPSendSocketOutsidePoller: a source port's send socket is not in Go's
// network poller (the epoll instance whose /proc fdinfo lists the
// descriptors it watches), where each datagram it sent woke the thread
// waiting in the poller when the kernel freed it; the receiving socket is
// (its Go reader waits there). The datagram still arrives.
func TestUDPSendSocketOutsidePoller(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprint("ipv6=", ipv6), func(t *testing.T) {
			a, b, macA, macB := udpPair(t, udpCase{name: "poller", ipv6: ipv6})
			const port = 0xc0ab
			f := ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), port),
				dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(1, 100)}.build()
			rd := startReader(b, 1, 2048, 0, 5*time.Second)
			if _, err := a.Write([][]byte{f}, 0); err != nil {
				t.Fatal(err)
			}
			if got := rd.wait(t); len(got) != 1 {
				t.Fatalf("received %d frames", len(got))
			}
			a.sockMu.Lock()
			send := fdOf(t, a.socks[port].s.conn)
			a.sockMu.Unlock()
			recv := fdOf(t, a.rx.conn)
			polled := pollerFDs(t)
			if polled[send] {
				t.Errorf("send socket (fd %d) is in Go's poller (watched: %v)", send, polled)
			}
			if !polled[recv] {
				t.Errorf("receiving socket (fd %d) is not in Go's poller (watched: %v)", recv, polled)
			}
		})
	}
}

func fdOf(t *testing.T, c socketConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// pollerFDs returns the descriptors the process's epoll instances watch
// (the "tfd:" lines of their /proc/self/fdinfo): Go's poller's.
func pollerFDs(t *testing.T) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := map[int]bool{}
	for _, e := range ents {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); l != "anon_inode:[eventpoll]" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			var fd int
			if _, err := fmt.Sscanf(line, "tfd: %d", &fd); err == nil {
				fds[fd] = true
			}
		}
	}
	if len(fds) == 0 {
		t.Fatal("no epoll instance watching anything in /proc/self/fd")
	}
	return fds
}
