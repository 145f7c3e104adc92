package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
)

// TestRpingRoCE runs softrdma rping --transport roce server and client
// against each other over UDP on loopback: rdma_cm over the IB CM on QP1 on
// both sides. Both exit 0 and print rping.c's lines for every ping, and the
// client's capture decodes with no error and has the CM MADs on QP1 and
// each ping's RC packets.
func TestRpingRoCE(t *testing.T) {
	const count, size = 10, 64
	port := strconv.Itoa(20000 + int(time.Now().UnixNano()%10000))
	net3 := loopbackNet()
	srv, cli := net3+"1", net3+"2"
	pcap := filepath.Join(t.TempDir(), "rping.pcap")
	var sOut, sErr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- rpingCmd([]string{"--transport", "roce", "-s", "-a", srv, "-p", port, "-v", "--timeout", "30s"}, &sOut, &sErr)
	}()
	code, cOut, cErr := untilListening(50*time.Millisecond, []string{"REJECTED"}, func(stdout, stderr io.Writer) int {
		return rpingCmd([]string{"--transport", "roce", "-c", "-a", srv, "-I", cli, "-p", port, "-C", strconv.Itoa(count),
			"-S", strconv.Itoa(size), "-v", "-V", "--pcap", pcap, "--timeout", "30s"}, stdout, stderr)
	})
	if code != 0 {
		t.Fatalf("client exit %d\n%s%s", code, cOut.String(), cErr.String())
	}
	select {
	case c := <-done:
		if c != 0 {
			t.Fatalf("server exit %d\n%s%s", c, sOut.String(), sErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not end")
	}
	checkRpingLines(t, cOut.String(), sOut.String(), count, size)
	res, text := decodeFile(t, pcap, decode.Options{Flows: true})
	if len(res.Errors) != 0 {
		t.Errorf("decode errors %v", res.Errors)
	}
	for _, m := range []string{"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"} {
		if !strings.Contains(text, m) {
			t.Errorf("no %s on QP1 in the capture:\n%s", m, text)
		}
	}
	// Per ping: 2 client SENDs, 2 server SENDs, a READ request and its
	// response, a WRITE: at least 7 RC packets.
	rdma := res.RDMAFrames
	if rdma < 7*count {
		t.Errorf("%d RDMA frames, want at least %d", rdma, 7*count)
	}
}
