package pcaptap

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/netio"
)

// TestTCPPcapNG: the synthesised TCP segments of an iWARP connection written
// as pcapng (--pcap FILE.pcapng) read back in tshark: every octet of both
// directions, with no TCP analysis warning (lost segment, bad sequence).
func TestTCPPcapNG(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed: nothing independent to read the file back")
	}
	name := filepath.Join(t.TempDir(), "conn.pcapng")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := NewTCP(f, netio.FormatForPath(name))
	if err != nil {
		t.Fatal(err)
	}
	o := p.Observe(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 7174})
	o.Sent(bytes.Repeat([]byte("0123456789"), 400))
	o.Received([]byte("reply"))
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	tsharkFields := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command(tshark, append([]string{"-r", name, "-T", "fields"}, args...)...).Output()
		if err != nil {
			t.Fatalf("tshark -r: %v\n%s", err, out)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			return strings.Split(s, "\n")
		}
		return nil
	}
	total := 0
	lens := tsharkFields("-e", "tcp.len")
	for _, l := range lens {
		n, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("tcp.len %q", l)
		}
		total += n
	}
	if len(lens) != 7 || total != 4005 {
		t.Errorf("tshark read %d segments of %d octets (%v), want 7 of 4005", len(lens), total, lens)
	}
	if bad := tsharkFields("-Y", "tcp.analysis.flags", "-e", "frame.number"); len(bad) != 0 {
		t.Errorf("tshark's TCP analysis flags frames %v", bad)
	}
}
