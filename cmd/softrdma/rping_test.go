package main

import (
	"bytes"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/internal/tcploop"
)

// TestRping runs softrdma rping server and client against each other over
// loopback: both exit 0, both print rping.c's lines, and the client's capture
// decodes with no error and holds the MPA exchange rdma_cm makes on iWARP
// (IRD/ORD words only, peer-to-peer mode with the Read RTR), the RTR and its
// answer, and the 7 FPDUs of each ping. With -q at both ends (QPs the
// program creates and moves itself; the MPA exchange moves them to RTS) the
// wire is the same; -q was refused on iWARP.
func TestRping(t *testing.T) {
	for _, c := range []struct {
		name, crc string
		flags     []string
	}{
		{"accept", "accept", nil},
		{"require", "require", nil},
		{"accept -q", "accept", []string{"-q"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const count, size = 10, 64
			crc := c.crc
			port := strconv.Itoa(tcploop.FreePort(t))
			pcap := filepath.Join(t.TempDir(), "rping.pcap")
			var sOut, sErr bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- rpingCmd(append([]string{"-s", "-a", "127.0.0.1", "-p", port, "-v", "--crc", crc, "--timeout", "30s"}, c.flags...), &sOut, &sErr)
			}()
			code, cOut, cErr := untilListening(50*time.Millisecond, []string{"refused"}, func(stdout, stderr io.Writer) int {
				return rpingCmd(append([]string{"-c", "-a", "127.0.0.1", "-p", port, "-C", strconv.Itoa(count), "-S", strconv.Itoa(size),
					"-v", "-V", "--crc", crc, "--pcap", pcap, "--timeout", "30s"}, c.flags...), stdout, stderr)
			})
			if code != 0 {
				t.Fatalf("client exit %d\n%s%s", code, cOut.String(), cErr.String())
			}
			if sc := <-done; sc != 0 {
				t.Fatalf("server exit %d\n%s%s", sc, sOut.String(), sErr.String())
			}
			checkRpingLines(t, cOut.String(), sOut.String(), count, size)
			res, text := decodeFile(t, pcap, decode.Options{})
			if len(res.Errors) != 0 {
				t.Fatalf("decode errors %v", res.Errors)
			}
			// The start frames, the Read RTR and its answer, and the zero-length
			// Writes the client sends while the answer has not come (after
			// 20 ms, doubling: none unless the machine is loaded).
			kicks := strings.Count(text, "iWARP Write len=0 ")
			if res.Packets != 4+kicks+7*count {
				t.Errorf("%d MPA frames, want %d\n%s", res.Packets, 4+kicks+7*count, text)
			}
			wantCRC := map[string]string{"accept": "---H", "require": "-C-H"}[crc]
			for _, frame := range []string{"Request", "Reply"} {
				if !strings.Contains(text, "MPA "+frame+" rev=2 flags="+wantCRC+" IRD=1 ORD=1 P2P RTR=read private_data=4") {
					t.Errorf("no MPA %s with flags %s, IRD=ORD=1, the Read RTR and only the IRD/ORD words:\n%s", frame, wantCRC, text)
				}
			}
		})
	}
}

func TestRpingFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"-s", "-c"}, {"-c"}, {"-s", "-S", "22"}, {"-s", "-S", "65536"}, {"-s", "--transport", "roce"}, {"-s", "--crc", "x"}} {
		var out, errOut bytes.Buffer
		if code := rpingCmd(args, &out, io.Writer(&errOut)); code != 2 {
			t.Errorf("rping %v: exit %d, want 2", args, code)
		}
	}
	var out, errOut bytes.Buffer
	rpingCmd([]string{"-s", "--transport", "roce"}, &out, &errOut)
	if !strings.Contains(errOut.String(), "the server needs -a ADDR") {
		t.Errorf("--transport roce says %q", errOut.String())
	}
}

// rpingCMEventLine is rping.c's -d line for an rdma_cm event.
var rpingCMEventLine = regexp.MustCompile(`(?m)^cma_event type RDMA_CM_EVENT_(\w+) cma_id (0x[0-9a-f]+) \((parent|child)\)$`)

// TestRpingCMEvents runs rping with -d over each transport and checks that
// both sides' connections are the rdma_cm Manager's: each side prints the
// events its IDs got, as rping.c's cma event handler does, and the two
// transports give the same sequence (client: address and route resolved,
// established, disconnected, all on its one ID; server: the connection
// request, established and disconnected on the child ID). Were either
// transport to connect without the Manager, no events would come.
func TestRpingCMEvents(t *testing.T) {
	wantClient := []string{"ADDR_RESOLVED parent", "ROUTE_RESOLVED parent", "ESTABLISHED parent", "DISCONNECTED parent"}
	wantServer := []string{"CONNECT_REQUEST child", "ESTABLISHED child", "DISCONNECTED child"}
	net3 := loopbackNet()
	for _, tr := range []struct{ name, addr, src, retry string }{
		{"iwarp", "127.0.0.1", "", "refused"},
		{"roce", net3 + "1", net3 + "2", "REJECTED"},
	} {
		t.Run(tr.name, func(t *testing.T) {
			port := strconv.Itoa(tcploop.FreePort(t))
			if tr.name == "roce" {
				port = strconv.Itoa(30000 + int(time.Now().UnixNano()%10000))
			}
			common := []string{"--transport", tr.name, "-a", tr.addr, "-p", port, "-d", "--timeout", "30s"}
			var sOut, sErr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- rpingCmd(append([]string{"-s"}, common...), &sOut, &sErr) }()
			cli := []string{"-c", "-C", "2", "-V"}
			if tr.src != "" {
				cli = append(cli, "-I", tr.src)
			}
			code, cOut, cErr := untilListening(50*time.Millisecond, []string{tr.retry}, func(stdout, stderr io.Writer) int {
				return rpingCmd(append(cli, common...), stdout, stderr)
			})
			if code != 0 {
				t.Fatalf("client exit %d\n%s%s", code, cOut.String(), cErr.String())
			}
			select {
			case sc := <-done:
				if sc != 0 {
					t.Fatalf("server exit %d\n%s%s", sc, sOut.String(), sErr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("server did not end")
			}
			for _, side := range []struct {
				name      string
				out, errs string
				want      []string
				idLine    string // the line naming the ID the events are about
			}{
				{"client", cOut.String(), cErr.String(), wantClient, "created cm_id "},
				{"server", sOut.String(), sErr.String(), wantServer, "child cma "},
			} {
				var got []string
				ids := map[string]bool{}
				for _, m := range rpingCMEventLine.FindAllStringSubmatch(side.out, -1) {
					got = append(got, m[1]+" "+m[3])
					ids[m[2]] = true
				}
				if strings.Join(got, ", ") != strings.Join(side.want, ", ") {
					t.Errorf("%s: rdma_cm events %q, want %q\n%s", side.name, got, side.want, side.out)
				}
				// Every event is about the one ID the side connected.
				var id string
				for _, l := range strings.Split(side.out, "\n") {
					if s, ok := strings.CutPrefix(l, side.idLine); ok {
						id = s
					}
				}
				if len(ids) != 1 || !ids[id] {
					t.Errorf("%s: events about IDs %v, want only %q", side.name, ids, id)
				}
				if want := side.name + " DISCONNECT EVENT...\n"; side.errs != want {
					t.Errorf("%s: stderr %q, want %q", side.name, side.errs, want)
				}
			}
		})
	}
}
