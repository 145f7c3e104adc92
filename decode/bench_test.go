package decode

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// roceFrames returns every RoCE frame of the rxe captures.
func roceFrames(t testing.TB) [][]byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(captureDir, "rxe-*.pcap"))
	var out [][]byte
	var f roce.Frame
	for _, file := range files {
		for _, fr := range readFrames(t, readFile(t, file)) {
			if f.DecodeEthernet(fr.data) == nil {
				out = append(out, fr.data)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no RoCE frames")
	}
	return out
}

// rocePath is the decoder's RoCE path: roce.Frame.DecodeEthernet, ibtransport.Packet.Decode
// and the ICRC check. It returns the number of good packets.
type rocePath struct {
	f   roce.Frame
	pkt ibtransport.Packet
}

func (r *rocePath) decode(frames [][]byte) (good int) {
	for _, b := range frames {
		if r.f.DecodeEthernet(b) == nil && r.pkt.Decode(r.f.IB) == nil && roce.VerifyICRC(&r.f) == nil {
			good++
		}
	}
	return good
}

// gopacketPath is gopacket's own Ethernet/IPv4/IPv6/UDP DecodingLayerParser.
type gopacketPath struct {
	eth     layers.Ethernet
	ip4     layers.IPv4
	ip6     layers.IPv6
	udp     layers.UDP
	parser  *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
}

func newGopacketPath() *gopacketPath {
	g := &gopacketPath{decoded: make([]gopacket.LayerType, 0, 8)}
	g.parser = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &g.eth, &g.ip4, &g.ip6, &g.udp)
	g.parser.IgnoreUnsupported = true
	return g
}

func (g *gopacketPath) decode(frames [][]byte) (udp int) {
	for _, b := range frames {
		if g.parser.DecodeLayers(b, &g.decoded) == nil && len(g.decoded) == 3 {
			udp++
		}
	}
	return udp
}

// TestRoCEPathAllocs: the RoCE path decodes every capture frame without allocating.
func TestRoCEPathAllocs(t *testing.T) {
	frames := roceFrames(t)
	var r rocePath
	if n := r.decode(frames); n != len(frames) {
		t.Fatalf("%d of %d frames decode", n, len(frames))
	}
	if a := testing.AllocsPerRun(20, func() { r.decode(frames) }); a != 0 {
		t.Errorf("%v allocations per %d packets, want 0", a, len(frames))
	}
}

// BenchmarkRoCEDecode measures the RoCE path (Ethernet, IP, UDP, BTH and extension
// headers, ICRC check) against gopacket's DecodingLayerParser over Ethernet/IP/UDP
// alone, on the same frames in the same run. It reports both rates in packets per second
// and their ratio (RoCE path / gopacket: above 1 the RoCE path, ICRC included, is
// faster).
func BenchmarkRoCEDecode(b *testing.B) {
	frames := roceFrames(b)
	var r rocePath
	g := newGopacketPath()
	if a := testing.AllocsPerRun(5, func() { r.decode(frames) }); a != 0 {
		b.Fatalf("RoCE path: %v allocations per %d packets", a, len(frames))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var ours, theirs time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r.decode(frames)
		t1 := time.Now()
		g.decode(frames)
		theirs += time.Since(t1)
		ours += t1.Sub(t0)
	}
	n := float64(b.N) * float64(len(frames))
	b.ReportMetric(n/ours.Seconds(), "pkts/s")
	b.ReportMetric(n/theirs.Seconds(), "gopacket-pkts/s")
	b.ReportMetric(theirs.Seconds()/ours.Seconds(), "ratio")
}
