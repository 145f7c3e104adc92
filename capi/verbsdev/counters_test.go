package verbsdev_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/counters"
)

// TestCountersDump runs ibv_rc_pingpong at both ends on softrdma's library
// (pair) with SOFTRDMA_COUNTERS_DUMP=DIR/c-%p.json: each process writes its
// device's counters at exit, in its own file (%p, its PID). Each end sent
// its 20 messages of 64 bytes (one packet each: BTH and payload) once, plus
// what it sent again and its ACKs and NAKs (16 bytes: BTH and AETH); the
// QP, destroyed before exit, is in the device's totals.
func TestCountersDump(t *testing.T) {
	lib := buildLib(t)
	dir := t.TempDir()
	t.Setenv("SOFTRDMA_COUNTERS_DUMP", filepath.Join(dir, "c-%p.json"))
	const n, size = 20, 64
	pair(t, lib, "ibv_rc_pingpong", "-g", "1", "-n", "20", "-s", "64")
	files, _ := filepath.Glob(filepath.Join(dir, "c-*.json"))
	if len(files) != 2 {
		t.Fatalf("dump files %v, want one per process", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s counters.Snapshot
		if err := json.Unmarshal(b, &s); err != nil || len(s.Devices) != 1 {
			t.Fatalf("%s: %v\n%s", f, err, b)
		}
		d := s.Devices[0]
		c := d.Counters
		var naks uint64
		for _, k := range counters.NAKCodes {
			naks += c.NAKsSent[k]
		}
		acks := c.AcksSent + naks + c.RNRNAKsSent
		sends := c.PacketsOut - acks - c.Retransmissions - c.Probes
		if d.Name != "sr_roce0" || d.Transport != "roce" || !strings.HasPrefix(d.Address, "127.") || len(d.QPs) != 0 {
			t.Errorf("%s: device %s %s %s, %d live QPs; want sr_roce0, roce, a loopback address, none", f, d.Name, d.Transport, d.Address, len(d.QPs))
		}
		if sends != n || c.BytesOut != (c.PacketsOut-acks)*(12+size)+acks*16 {
			t.Errorf("%s: packets_out %d bytes_out %d (ACKs and NAKs %d, retransmissions %d, probes %d): want %d SENDs of %d bytes once each",
				f, c.PacketsOut, c.BytesOut, acks, c.Retransmissions, c.Probes, n, 12+size)
		}
	}
}
