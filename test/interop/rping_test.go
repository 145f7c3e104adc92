package interop_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/rpingtext"
	"github.com/softrdma/softrdma/test/interop"
)

// TestSiwRping runs softrdma rping against rdma-core's rping over the kernel's
// siw (rdma_cm over iWARP), both directions, -C 10 -S 64 -v (-V on the
// client), with the stock siw and with siw built with mpa_crc_required (the
// softrdma client then asks for CRCs with --crc request; the softrdma server
// accepts the CRCs the siw client asks for). Both sides exit 0, print rping's
// lines exactly, and the capture on the guest's tap decodes with no error (every
// MPA CRC verified) and no frame tshark calls malformed, and softrdma's own
// --pcap of the connection also has the ten 64-octet READ responses (the tap's
// capture lost the second half of an exchange twice in this session's runs,
// with PcapAll too, the end marker captured: tcpdump's loss, not the wire's).
func TestSiwRping(t *testing.T) {
	h := interop.Require(t)
	for _, v := range []struct {
		name, siw, ip, crc string
	}{
		{"stock", "default", "10.77.0.51", "accept"},
		{"crc", "crc", "10.77.0.52", "request"},
	} {
		t.Run(v.name, func(t *testing.T) {
			g := h.Boot(t, "rping"+v.ip[len(v.ip)-2:], interop.BootOptions{IP: v.ip, NoIPv6: true, Links: "siw", Siw: v.siw})
			const count, size = 10, 64
			t.Run("siw-server", func(t *testing.T) {
				pcap, own := filepath.Join(t.TempDir(), "rping-siw-server.pcap"), filepath.Join(t.TempDir(), "softrdma.pcap")
				stop := g.PcapAll(t, pcap, "tcp port 7174")
				job := g.ExecBackground(t, "rping", "-s", "-a", g.IP, "-v")
				var host interop.Result
				for try := 0; try < 60; try++ { // until the guest's rping listens
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					host = h.HostRun(ctx, t, "rping", "-c", "-a", g.IP, "-C", "10", "-S", "64", "-v", "-V", "--crc", v.crc, "--pcap", own)
					cancel()
					if host.OK() || !strings.Contains(host.Stderr, "refused") {
						break
					}
					time.Sleep(time.Second)
				}
				guest := job.Wait(t, 3*time.Minute)
				stop()
				rpingCheck(t, host, guest, rpingtext.Lines("ping data: ", count, size), rpingtext.Lines("server ping data: ", count, size))
				rpingCheckCapture(t, pcap, v.crc != "accept", -1)
				rpingCheckCapture(t, own, v.crc != "accept", count)
			})
			t.Run("softrdma-server", func(t *testing.T) {
				pcap, own := filepath.Join(t.TempDir(), "rping-softrdma-server.pcap"), filepath.Join(t.TempDir(), "softrdma.pcap")
				stop := g.PcapAll(t, pcap, "tcp port 7174")
				p := h.HostStart(t, "rping", "-s", "-a", interop.HostIPv4, "-v", "--timeout", "5m", "--pcap", own)
				if !p.WaitListenTCP(7174, time.Minute) {
					t.Fatalf("softrdma rping did not listen:\n%s", p.Wait(time.Second))
				}
				guest := g.Exec(t, 3*time.Minute, "rping", "-c", "-a", interop.HostIPv4, "-C", "10", "-S", "64", "-v", "-V")
				host := p.Wait(3 * time.Minute)
				stop()
				rpingCheck(t, guest, host, rpingtext.Lines("ping data: ", count, size), rpingtext.Lines("server ping data: ", count, size))
				rpingCheckCapture(t, pcap, v.crc != "accept", -1)
				rpingCheckCapture(t, own, v.crc != "accept", count)
			})
		})
	}
}

// rpingCheck compares both sides' exit status and output with rping's.
func rpingCheck(t *testing.T, client, server interop.Result, wantClient, wantServer string) {
	t.Helper()
	if !client.OK() || client.Stdout != wantClient {
		t.Errorf("client: want exit 0 and\n%s\ngot:\n%s", wantClient, client)
	}
	if !server.OK() || server.Stdout != wantServer {
		t.Errorf("server: want exit 0 and\n%s\ngot:\n%s", wantServer, server)
	}
}

// rpingCheckCapture decodes an rping capture: no errors, the MPA exchange rdma_cm
// makes on iWARP (revision 2, IRD=ORD=1, peer-to-peer mode with the Read RTR
// when softrdma initiates, only the IRD/ORD words as private data, CRC as
// negotiated), count 64-octet READ responses (count < 0: not checked), and no
// frame tshark calls malformed.
func rpingCheckCapture(t *testing.T, pcap string, crc bool, count int) {
	t.Helper()
	out := interop.Decode(t, pcap)
	flags := "---H"
	if crc {
		flags = "-C-H"
	}
	// softrdma as the initiator asks for peer-to-peer mode with the Read RTR
	// (rdmacm.initiatorRTR), and siw answers it; siw as the initiator does not.
	p2p := ""
	if strings.Contains(out, "MPA Request rev=2 flags="+flags+" IRD=1 ORD=1 P2P RTR=read ") {
		p2p = " P2P RTR=read"
	}
	for _, want := range []string{"MPA Request rev=2 flags=" + flags + " IRD=1 ORD=1" + p2p + " private_data=4", "MPA Reply rev=2 flags=" + flags + " IRD=1 ORD=1" + p2p + " private_data=4"} {
		if !strings.Contains(out, want) {
			t.Errorf("capture lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "iWARP Read Response len=64"); count >= 0 && n != count {
		t.Errorf("capture has %d Read Responses of 64 octets, want %d:\n%s", n, count, out)
	}
	if malformed, _ := interop.TsharkMalformed(t, pcap); malformed > 0 {
		t.Errorf("tshark finds %d malformed frames in %s", malformed, pcap)
	}
}
