package pcaptap

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/netio"
)

// TestTCPFramesValid: over IPv4 and IPv6, every frame TCP writes passes the
// header views' Checks and checksums, decodes in gopacket without a failure
// layer, and, when tshark is installed, tshark (checksum validation on) finds
// no malformed frame and no bad IP or TCP checksum in the file.
func TestTCPFramesValid(t *testing.T) {
	tests := []struct {
		name          string
		local, remote *net.TCPAddr
	}{
		{"ipv4", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 4), Port: 7174}},
		{"ipv6", &net.TCPAddr{IP: net.ParseIP("fd00::1"), Port: 40001}, &net.TCPAddr{IP: net.ParseIP("fd00::2"), Port: 7174}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var file bytes.Buffer
			p, err := NewTCP(&file, netio.FormatPcap)
			if err != nil {
				t.Fatal(err)
			}
			o := p.Observe(tt.local, tt.remote)
			o.Sent(bytes.Repeat([]byte{0xC3}, 2*tcpMSS+1)) // odd: the checksum's last byte alone
			o.Received([]byte("MPA Rep Frame"))
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			capture := append([]byte(nil), file.Bytes()...)
			r, err := pcapgo.NewReader(&file)
			if err != nil {
				t.Fatal(err)
			}
			frames := 0
			for {
				data, _, err := r.ReadPacketData()
				if err != nil {
					break
				}
				frames++
				checkTCPFrame(t, frames, data)
			}
			if frames != 3+3+1 {
				t.Errorf("%d frames, want 7", frames)
			}
			tsharkClean(t, capture)
		})
	}
}

// checkTCPFrame checks frame number n with the header views and gopacket.
func checkTCPFrame(t *testing.T, n int, data []byte) {
	t.Helper()
	eth := header.Ethernet(data)
	if err := eth.Check(); err != nil {
		t.Fatalf("frame %d: %v", n, err)
	}
	var seg header.TCP
	var src, dst netip.Addr
	switch ip := data[header.EthernetLen:]; eth.Type() {
	case header.EtherTypeIPv4:
		v4 := header.IPv4(ip)
		if err := v4.Check(); err != nil || !v4.IsChecksumValid() || v4.Protocol() != header.IPProtocolTCP {
			t.Fatalf("frame %d: ipv4 %v, checksum valid %v, protocol %d", n, err, v4.IsChecksumValid(), v4.Protocol())
		}
		seg, src, dst = header.TCP(ip[v4.HeaderLen():v4.TotalLength()]), v4.Src(), v4.Dst()
	case header.EtherTypeIPv6:
		v6 := header.IPv6(ip)
		if err := v6.Check(); err != nil || v6.NextHeader() != header.IPProtocolTCP {
			t.Fatalf("frame %d: ipv6 %v, next header %d", n, err, v6.NextHeader())
		}
		seg, src, dst = header.TCP(ip[header.IPv6Len:header.IPv6Len+int(v6.PayloadLength())]), v6.Src(), v6.Dst()
	default:
		t.Fatalf("frame %d: ethertype %#04x", n, eth.Type())
	}
	if err := seg.Check(); err != nil || !seg.IsChecksumValid(src, dst) {
		t.Errorf("frame %d: tcp %v, checksum valid %v", n, err, seg.IsChecksumValid(src, dst))
	}
	pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
	if f := pkt.ErrorLayer(); f != nil {
		t.Errorf("frame %d: gopacket: %v", n, f.Error())
	}
	if pkt.Layer(layers.LayerTypeTCP) == nil {
		t.Errorf("frame %d: gopacket finds no TCP layer", n)
	}
}

// tsharkClean runs tshark, if installed, over capture with IP and TCP checksum
// validation on and fails on any malformed frame or bad checksum.
func tsharkClean(t *testing.T, capture []byte) {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: not checked by tshark")
		return
	}
	f := filepath.Join(t.TempDir(), "tcp.pcap")
	if err := os.WriteFile(f, capture, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", f, "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
		"-Y", "_ws.malformed || ip.checksum.status == 0 || tcp.checksum.status == 0 || !tcp", "-T", "fields", "-e", "frame.number").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.HasPrefix(l, "Running as") {
			t.Errorf("tshark flags frames:\n%s", out)
			break
		}
	}
}
