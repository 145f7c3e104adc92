package roce

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/ibtransport"
)

// layerTestFrames returns every frame of testdata/captures/rxe-*.pcap that
// Frame.DecodeEthernet accepts as RoCE, with the file it came from.
func layerTestFrames(t testing.TB) (frames [][]byte, names []string) {
	t.Helper()
	files, err := filepath.Glob("../testdata/captures/rxe-*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rxe captures: %v", err)
	}
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapgo.NewReader(fh)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; ; i++ {
			data, _, err := r.ReadPacketData()
			if err != nil {
				break
			}
			var f Frame
			if f.DecodeEthernet(data) == nil {
				frames = append(frames, data)
				names = append(names, filepath.Base(name)+"#"+itoa(i))
			}
		}
		fh.Close()
	}
	return frames, names
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestLayersCaptures decodes every RoCE frame of the captures with gopacket.NewPacket and
// checks the layer stack, the fields against roce.Frame and ibtransport.Packet, the ICRC,
// and that serializing the decoded layers gives back the frame bytes.
func TestLayersCaptures(t *testing.T) {
	frames, names := layerTestFrames(t)
	if len(frames) < 400 {
		t.Fatalf("only %d RoCE frames in the captures", len(frames))
	}
	for i, data := range frames {
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("%s: decode error: %v", names[i], el.Error())
		}
		var want []gopacket.LayerType
		want = append(want, layers.LayerTypeEthernet)
		if p.Layer(layers.LayerTypeIPv6) != nil {
			want = append(want, layers.LayerTypeIPv6)
		} else {
			want = append(want, layers.LayerTypeIPv4)
		}
		want = append(want, layers.LayerTypeUDP, LayerTypeIBTransport)
		var f Frame
		if err := f.DecodeEthernet(data); err != nil {
			t.Fatal(err)
		}
		var pkt ibtransport.Packet
		if err := pkt.Decode(f.IB); err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
		if len(pkt.Payload) > 0 {
			want = append(want, gopacket.LayerTypePayload)
		}
		want = append(want, LayerTypeICRC)
		var got []gopacket.LayerType
		for _, l := range p.Layers() {
			got = append(got, l.LayerType())
		}
		if !equalTypes(got, want) {
			t.Fatalf("%s: layers %v, want %v", names[i], got, want)
		}
		ib := p.Layer(LayerTypeIBTransport).(*IBTransport)
		if !bytes.Equal(ib.Contents, f.IB[:pkt.HeaderLen()]) || !bytes.Equal(ib.Payload, pkt.Payload) ||
			!bytes.Equal(ib.Raw, f.IB) {
			t.Errorf("%s: IBTransport contents/payload/raw differ from roce.Frame", names[i])
		}
		if ib.Packet.BTH.PSN() != pkt.BTH.PSN() || ib.Packet.BTH.DestQP() != pkt.BTH.DestQP() {
			t.Errorf("%s: BTH fields differ", names[i])
		}
		if al := p.ApplicationLayer(); len(pkt.Payload) > 0 && (al == nil || !bytes.Equal(al.Payload(), pkt.Payload)) {
			t.Errorf("%s: application layer is not the IB payload", names[i])
		}
		icrc := p.Layer(LayerTypeICRC).(*ICRC)
		if icrc.CRC != f.ICRC || len(icrc.Pad) != int(pkt.BTH.PadCount()) {
			t.Errorf("%s: ICRC layer %#x pad %d, want %#x pad %d", names[i], icrc.CRC, len(icrc.Pad), f.ICRC, pkt.BTH.PadCount())
		}
		if err := VerifyPacketICRC(p); err != nil {
			t.Errorf("%s: VerifyPacketICRC: %v", names[i], err)
		}
		// Serialize the decoded layers: the frame comes back byte for byte.
		buf := gopacket.NewSerializeBuffer()
		var sl []gopacket.SerializableLayer
		for _, l := range p.Layers() {
			s, ok := l.(gopacket.SerializableLayer)
			if !ok {
				t.Fatalf("%s: layer %v is not serializable", names[i], l.LayerType())
			}
			sl = append(sl, s)
		}
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, sl...); err != nil {
			t.Fatalf("%s: serialize: %v", names[i], err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("%s: serialized frame differs:\n got %x\nwant %x", names[i], buf.Bytes(), data)
		}
	}
}

func equalTypes(a, b []gopacket.LayerType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLayersBitFlip: a flipped payload bit still decodes but fails VerifyPacketICRC.
func TestLayersBitFlip(t *testing.T) {
	frames, names := layerTestFrames(t)
	for i, orig := range frames {
		data := append([]byte(nil), orig...)
		data[len(data)-5] ^= 0x01 // the last byte before the ICRC
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		if p.ErrorLayer() != nil {
			continue // the flipped byte was a header field that no longer decodes
		}
		if err := VerifyPacketICRC(p); !errors.Is(err, ErrBadICRC) {
			t.Errorf("%s: flipped bit: VerifyPacketICRC = %v, want ErrBadICRC", names[i], err)
		}
	}
}

// TestLayersRoCEv1 rebuilds capture packets as RoCEv1 (Ethertype 0x8915 + GRH) with
// FrameHeaders and decodes them through the GRH layer.
func TestLayersRoCEv1(t *testing.T) {
	frames, names := layerTestFrames(t)
	for i, data := range frames[:40] {
		var f Frame
		if err := f.DecodeEthernet(data); err != nil {
			t.Fatal(err)
		}
		h := f.Headers()
		h.Version = RoCEv1
		h.Src, h.Dst = netip.AddrFrom16(f.Src.As16()), netip.AddrFrom16(f.Dst.As16())
		v1 := make([]byte, h.Len()+len(f.IB)+ICRCLen)
		copy(v1[h.Len():], f.IB)
		if _, err := h.EncodeFrame(v1, len(f.IB)); err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(v1, layers.LayerTypeEthernet, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("%s: RoCEv1: %v", names[i], el.Error())
		}
		g, ok := p.Layer(LayerTypeGRH).(*GRHLayer)
		if !ok || p.Layer(LayerTypeIBTransport) == nil || p.Layer(LayerTypeICRC) == nil {
			t.Fatalf("%s: RoCEv1 layers: %v", names[i], p.Layers())
		}
		if p.NetworkLayer() != g || g.GRH.SourceAddr() != h.Src {
			t.Errorf("%s: GRH network layer / SGID wrong", names[i])
		}
		if err := VerifyPacketICRC(p); err != nil {
			t.Errorf("%s: RoCEv1 ICRC: %v", names[i], err)
		}
		buf := gopacket.NewSerializeBuffer()
		var sl []gopacket.SerializableLayer
		for _, l := range p.Layers() {
			sl = append(sl, l.(gopacket.SerializableLayer))
		}
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, sl...); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), v1) {
			t.Fatalf("%s: RoCEv1 serialized frame differs", names[i])
		}
	}
}

// TestLayersBuild builds a new RoCEv2 frame from layers (FixLengths, ICRC post-pass) and
// checks it with Frame.DecodeEthernet and VerifyICRC.
func TestLayersBuild(t *testing.T) {
	payload := []byte("hello, rdma") // 11 bytes: pad count 1
	var fields ibtransport.PacketFields
	fields.BTH.Opcode = ibtransport.OpcodeRCSendOnly
	fields.BTH.PadCount = ibtransport.PadCountFor(len(payload))
	fields.BTH.PKey = 0xffff
	fields.BTH.DestQP = 0x11
	fields.BTH.AckReq = true
	fields.BTH.PSN = 0xabcdef
	ib := &IBTransport{}
	ib.Contents = ibtransport.AppendHeaders(nil, &fields)
	eth := &layers.Ethernet{SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
		SrcIP: []byte{10, 0, 0, 1}, DstIP: []byte{10, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: 0xc000, DstPort: UDPPort}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, ib, gopacket.Payload(payload), NewICRCTrailer(len(payload)))
	if err != nil {
		t.Fatal(err)
	}
	frame := buf.Bytes()
	if err := SetFrameICRC(frame); err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := f.DecodeEthernet(frame); err != nil {
		t.Fatal(err)
	}
	if err := VerifyICRC(&f); err != nil {
		t.Fatal(err)
	}
	var pkt ibtransport.Packet
	if err := pkt.Decode(f.IB); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pkt.Payload, payload) || pkt.BTH.PSN() != 0xabcdef || !pkt.BTH.AckReq() {
		t.Errorf("built packet decodes as payload %q PSN %#x", pkt.Payload, pkt.BTH.PSN())
	}
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if err := VerifyPacketICRC(p); err != nil {
		t.Error(err)
	}
}

// TestLayersDecodingLayerParser decodes every RoCE frame with a DecodingLayerParser over
// gopacket's Ethernet/IP/UDP layers and these: the right layers, and no allocation.
func TestLayersDecodingLayerParser(t *testing.T) {
	frames, names := layerTestFrames(t)
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		grh     GRHLayer
		ib      IBTransport
		payload gopacket.Payload
		icrc    ICRC
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &grh, &ib, &payload)
	decoded := make([]gopacket.LayerType, 0, 8)
	for i, data := range frames {
		if err := parser.DecodeLayers(data, &decoded); err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
		if n := len(decoded); n < 4 || decoded[3] != LayerTypeIBTransport {
			t.Fatalf("%s: decoded %v", names[i], decoded)
		}
		if err := icrc.DecodeFromBytes(ib.Trailer, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(10, func() {
		for _, data := range frames {
			_ = parser.DecodeLayers(data, &decoded)
			_ = icrc.DecodeFromBytes(ib.Trailer, gopacket.NilDecodeFeedback)
		}
	})
	if allocs != 0 {
		t.Errorf("DecodingLayerParser over %d frames: %v allocations, want 0", len(frames), allocs)
	}
}

// truncFeedback records SetTruncated.
type truncFeedback struct{ truncated bool }

func (f *truncFeedback) SetTruncated() { f.truncated = true }

// TestLayersTruncated cuts every RoCE frame at every length: NewPacket never panics, and
// the IB layer reports a short packet as truncated.
func TestLayersTruncated(t *testing.T) {
	frames, _ := layerTestFrames(t)
	for _, data := range frames[:60] {
		for n := 0; n < len(data); n++ {
			p := gopacket.NewPacket(data[:n], layers.LayerTypeEthernet, gopacket.Default)
			_ = p.Layers()
		}
		var f Frame
		if err := f.DecodeEthernet(data); err != nil {
			t.Fatal(err)
		}
		whole := append(append([]byte(nil), f.IB...), data[len(data)-4:]...)
		hl := ibtransport.Opcode(whole[0]).HeaderLen()
		for n := 0; n < hl+ICRCLen; n++ {
			var ib IBTransport
			var fb truncFeedback
			err := ib.DecodeFromBytes(whole[:n], &fb)
			if err == nil {
				t.Fatalf("IB packet of %d bytes (headers %d) decoded", n, hl)
			}
			if !fb.truncated {
				t.Errorf("IB packet of %d bytes: %v without SetTruncated", n, err)
			}
			if ib.Contents != nil || ib.Packet.BTH != nil {
				t.Errorf("IB packet of %d bytes: layer not reset after error", n)
			}
		}
	}
	var g GRHLayer
	var fb truncFeedback
	if err := g.DecodeFromBytes(make([]byte, GRHLen-1), &fb); err == nil || !fb.truncated {
		t.Errorf("short GRH: err %v truncated %v", err, fb.truncated)
	}
	var c ICRC
	if err := c.DecodeFromBytes([]byte{1, 2, 3}, gopacket.NilDecodeFeedback); !errors.Is(err, ErrTruncated) {
		t.Errorf("3-byte ICRC trailer: %v", err)
	}
}

// FuzzIBTransportLayer: the layer never panics, and what it decodes re-serializes to
// the same bytes.
func FuzzIBTransportLayer(f *testing.F) {
	frames, _ := layerTestFrames(f)
	for _, data := range frames {
		var fr Frame
		if fr.DecodeEthernet(data) == nil {
			f.Add(append(append([]byte(nil), fr.IB...), data[len(data)-4:]...))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ib IBTransport
		if err := ib.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		var c ICRC
		if err := c.DecodeFromBytes(ib.Trailer, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("trailer of a decoded packet: %v", err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &ib, gopacket.Payload(ib.Payload), &c); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), b) {
			t.Fatalf("re-serialized %x, want %x", buf.Bytes(), b)
		}
	})
}

// FuzzGRHLayer: the RoCEv1 GRH layer never panics on any bytes, and a GRH it decodes
// serializes back to the same 40 bytes.
func FuzzGRHLayer(f *testing.F) {
	frames, _ := layerTestFrames(f)
	for _, data := range frames {
		if v1 := asRoCEv1(data); v1 != nil {
			f.Add(v1[14:])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var g GRHLayer
		if err := g.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			if g.GRH != nil {
				t.Fatal("GRH set after an error")
			}
			return
		}
		if len(g.Contents) != GRHLen || len(g.Payload) > len(b)-GRHLen || g.NextLayerType() != LayerTypeIBTransport {
			t.Fatalf("contents %d bytes, payload %d of %d, next %v", len(g.Contents), len(g.Payload), len(b), g.NextLayerType())
		}
		buf := gopacket.NewSerializeBuffer()
		if err := g.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), b[:GRHLen]) {
			t.Fatalf("re-serialized %x, want %x", buf.Bytes(), b[:GRHLen])
		}
	})
}
