package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// rsocketTransports are the transports the rsockets tests run over: over
// iWARP, which has no write with immediate, rdma-core's rsockets (and these)
// write, then send the 4-byte message inline (RS_OPT_MSG_SEND).
var rsocketTransports = []string{"roce", "iwarp"}

// TestRstream runs Debian's rstream (rdmacm-utils) on both ends, on the
// libraries' rsockets: a run of rstream's own checks of the data (-T v) with
// non-blocking calls (its default) and with blocking ones (-T b), transfers
// smaller than a send chunk, larger than a chunk and larger than the receive
// buffer (-B 65536: 128 KiB, credits in halves of 64 KiB). Each end prints
// its result row and exits 0; a mismatch is "data verification failed".
func TestRstream(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "rstream")
	cases := []struct {
		name string
		args []string
	}{
		{"nonblocking 1000", []string{"-S", "1000", "-C", "200", "-T", "v"}},
		{"nonblocking 300000 B 65536", []string{"-S", "300000", "-C", "10", "-B", "65536", "-T", "v"}},
		{"blocking 100000", []string{"-S", "100000", "-C", "20", "-T", "b", "-T", "v"}},
		{"blocking 300000 B 65536", []string{"-S", "300000", "-C", "10", "-B", "65536", "-T", "b", "-T", "v"}},
	}
	for _, tr := range rsocketTransports {
		for _, c := range cases {
			t.Run(tr+" "+c.name, func(t *testing.T) {
				port := fmt.Sprint(20000 + rand.IntN(20000))
				args := append([]string{"-p", port}, c.args...)
				so, co := cmPair(t, lib, tr, "rstream",
					func(a string) []string { return append([]string{"-b", a}, args...) },
					func(a string) []string { return append([]string{"-s", a}, args...) })
				row := regexp.MustCompile(`(?m)^custom\s+\S+\s+` + c.args[3] + `\s+1\s+`)
				for _, o := range []string{so, co} {
					if !row.MatchString(o) || strings.Contains(o, "verification failed") {
						t.Errorf("rstream did not complete:\nserver:\n%s\nclient:\n%s", so, co)
						break
					}
				}
			})
		}
	}
}

// TestRsocketCalls runs testdata/rsock.c (server and client): a non-blocking
// rconnect (EINPROGRESS, rpoll POLLOUT, SO_ERROR 0), rrecv's EAGAIN, 300000
// bytes each way through a 64 KiB receive buffer (checked), rshutdown
// SHUT_WR (the peer reads EOF and may still send; the client may not),
// rclose while the peer reads (rselect says readable; the peer reads the
// last bytes, then EOF), and a second connection on the same listener with
// blocking rconnect/raccept.
func TestRsocketCalls(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "rsock")
	for _, tr := range rsocketTransports {
		t.Run(tr, func(t *testing.T) {
			port := fmt.Sprint(20000 + rand.IntN(20000))
			so, co := cmPair(t, lib, tr, prog,
				func(a string) []string { return []string{"-b", a, "-p", port} },
				func(a string) []string { return []string{"-s", a, "-p", port} })
			for _, want := range []struct{ out, line string }{
				{co, "ok: rconnect: EINPROGRESS"},
				{co, "ok: connected: rpoll POLLOUT, SO_ERROR 0"},
				{co, "ok: rrecv with nothing there: EAGAIN"},
				{so, "ok: server received 300000 bytes intact"},
				{co, "ok: client got its 300000 bytes back"},
				{co, "ok: rsend after SHUT_WR fails"},
				{so, "ok: server sees EOF after the client's rshutdown(SHUT_WR)"},
				{so, "ok: server closed"},
				{co, "ok: rselect: readable"},
				{co, "ok: client reads bye, then EOF after the server's rclose"},
				{so, "ok: server: second connection on the same listener"},
				{co, "ok: client: second connection, blocking rconnect"},
			} {
				if !strings.Contains(want.out, want.line) {
					t.Errorf("no %q\nserver:\n%s\nclient:\n%s", want.line, so, co)
				}
			}
		})
	}
}
