package iwarp

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// layerStream is one direction of a TCP connection of a capture, reassembled.
type layerStream struct {
	name string
	data []byte
}

// layerStreams reassembles every TCP direction of the siw captures by sequence number
// (the captures hold no loss; retransmitted octets are dropped).
func layerStreams(t testing.TB) []layerStream {
	t.Helper()
	files, err := filepath.Glob("../testdata/captures/siw-*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no siw captures: %v", err)
	}
	var out []layerStream
	for _, file := range files {
		fh, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapgo.NewReader(fh)
		if err != nil {
			t.Fatal(err)
		}
		type dir struct {
			next uint32
			data []byte
		}
		dirs := map[string]*dir{}
		var order []string
		var (
			eth layers.Ethernet
			ip4 layers.IPv4
			tcp layers.TCP
		)
		parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &tcp)
		parser.IgnoreUnsupported = true
		var decoded []gopacket.LayerType
		for {
			data, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if parser.DecodeLayers(data, &decoded) != nil || len(decoded) < 3 {
				continue
			}
			key := ip4.SrcIP.String() + ":" + tcp.SrcPort.String() + ">" + ip4.DstIP.String() + ":" + tcp.DstPort.String()
			d := dirs[key]
			if d == nil {
				d = &dir{next: tcp.Seq}
				dirs[key] = d
				order = append(order, key)
			}
			if tcp.SYN {
				d.next = tcp.Seq + 1
				continue
			}
			p := tcp.Payload
			if len(p) == 0 {
				continue
			}
			if off := int32(d.next - tcp.Seq); off > 0 {
				if int(off) >= len(p) {
					continue
				}
				p = p[off:]
			} else if off < 0 {
				t.Fatalf("%s %s: hole at seq %d", file, key, d.next)
			}
			d.data = append(d.data, p...)
			d.next += uint32(len(p))
		}
		fh.Close()
		for _, k := range order {
			if len(dirs[k].data) > 0 {
				out = append(out, layerStream{filepath.Base(file) + " " + k, dirs[k].data})
			}
		}
	}
	return out
}

// TestLayersStreams walks every siw stream frame by frame with gopacket.NewPacket and
// checks each against the StreamDecoder's record, then serializes the decoded layers back
// to the frame's octets.
func TestLayersStreams(t *testing.T) {
	streams := layerStreams(t)
	var nStart, nFPDU, nCRC int
	for _, s := range streams {
		var recs []Record
		// Each direction alone: the decoder waits for the peer's start frame until Close,
		// then says it decodes without it; that record is not a frame.
		dec := NewStreamDecoder(nil, func(r *Record) {
			if errors.Is(r.Err, ErrNegotiationIncomplete) {
				return
			}
			c := *r
			recs = append(recs, c)
		})
		dec.Write(s.data)
		dec.Close()
		off := 0
		for i := 0; off < len(s.data); i++ {
			p := gopacket.NewPacket(s.data[off:], LayerTypeMPA, gopacket.NoCopy)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("%s @%d: %v", s.name, off, el.Error())
			}
			m := p.Layer(LayerTypeMPA).(*MPA)
			if i >= len(recs) || recs[i].Offset != uint64(off) || recs[i].Len != m.FrameLen() {
				t.Fatalf("%s @%d: MPA frame of %d octets does not match the stream decoder's record %d", s.name, off, m.FrameLen(), i)
			}
			want := []gopacket.LayerType{LayerTypeMPA}
			if m.Start != nil {
				nStart++
				if recs[i].Kind != RecordMPAFrame || !bytes.Equal(m.Start, recs[i].MPA) {
					t.Fatalf("%s @%d: start frame differs from the stream decoder's", s.name, off)
				}
				if len(m.Start.PrivateData()) > 0 {
					want = append(want, gopacket.LayerTypePayload)
				}
			} else {
				nFPDU++
				r := &recs[i]
				d, ok := p.Layer(LayerTypeDDPRDMAP).(*DDPRDMAP)
				if !ok || r.Kind != RecordFPDU || r.Err != nil {
					t.Fatalf("%s @%d: FPDU layers %v, record %v %v", s.name, off, p.Layers(), r.Kind, r.Err)
				}
				if !bytes.Equal(d.DDP, r.DDP) || d.RDMAP.Opcode() != r.RDMAP.Opcode() {
					t.Errorf("%s @%d: DDP segment differs from the stream decoder's", s.name, off)
				}
				if r.CRCChecked {
					nCRC++
					if err := m.VerifyCRC(); err != nil {
						t.Errorf("%s @%d: %v", s.name, off, err)
					}
				}
				switch d.RDMAP.Opcode() {
				case OpReadRequest:
					if d.ReadRequest == nil || len(d.Contents) != DDPUntaggedHeaderLen+ReadRequestLen {
						t.Errorf("%s @%d: read request header not decoded", s.name, off)
					}
				}
				want = append(want, LayerTypeDDPRDMAP)
				if len(d.Payload) > 0 {
					want = append(want, gopacket.LayerTypePayload)
				}
			}
			var got []gopacket.LayerType
			for _, l := range p.Layers() {
				got = append(got, l.LayerType())
			}
			if len(got) != len(want) {
				t.Fatalf("%s @%d: layers %v, want %v", s.name, off, got, want)
			}
			for j := range got {
				if got[j] != want[j] {
					t.Fatalf("%s @%d: layers %v, want %v", s.name, off, got, want)
				}
			}
			for _, opts := range []gopacket.SerializeOptions{{}, {FixLengths: true, ComputeChecksums: true}} {
				buf := gopacket.NewSerializeBuffer()
				var sl []gopacket.SerializableLayer
				for _, l := range p.Layers() {
					sl = append(sl, l.(gopacket.SerializableLayer))
				}
				if err := gopacket.SerializeLayers(buf, opts, sl...); err != nil {
					t.Fatal(err)
				}
				if frame := s.data[off : off+m.FrameLen()]; !bytes.Equal(buf.Bytes(), frame) {
					t.Fatalf("%s @%d (%+v): serialized\n %x\nwant\n %x", s.name, off, opts, buf.Bytes(), frame)
				}
			}
			off += m.FrameLen()
		}
	}
	// tshark's counts (logs/analyze.txt): 10 connections, each with a Request and a
	// Reply; FPDUs are the "CRC check" counts, good CRCs (siw-crc-*) or CRC fields of 0.
	const wantFPDU = 70 + 70 + 47 + 47 + 52 + 39
	if nStart != 20 || nFPDU != wantFPDU || nCRC != 70+47 {
		t.Errorf("start frames %d, FPDUs %d, CRCs checked %d; want 20, %d, %d", nStart, nFPDU, nCRC, wantFPDU, 70+47)
	}
}

// TestLayersDecodingLayerParser: the FPDUs of every stream through a DecodingLayerParser,
// without allocating.
func TestLayersDecodingLayerParser(t *testing.T) {
	streams := layerStreams(t)
	var (
		mpa     MPA
		ddp     DDPRDMAP
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(LayerTypeMPA, &mpa, &ddp, &payload)
	decoded := make([]gopacket.LayerType, 0, 4)
	walk := func(fail bool) (frames int) {
		for _, s := range streams {
			for off := 0; off < len(s.data); off += mpa.FrameLen() {
				if err := parser.DecodeLayers(s.data[off:], &decoded); err != nil {
					if fail {
						t.Fatalf("%s @%d: %v", s.name, off, err)
					}
					return
				}
				if fail && mpa.FPDU != nil && (len(decoded) < 2 || decoded[1] != LayerTypeDDPRDMAP) {
					t.Fatalf("%s @%d: decoded %v", s.name, off, decoded)
				}
				frames++
			}
		}
		return frames
	}
	n := walk(true)
	if allocs := testing.AllocsPerRun(10, func() { walk(false) }); allocs != 0 {
		t.Errorf("%d MPA frames through a DecodingLayerParser: %v allocations, want 0", n, allocs)
	}
}

type truncFeedback struct{ truncated bool }

func (f *truncFeedback) SetTruncated() { f.truncated = true }

// TestLayersTruncated cuts frames at every length: errors matching ErrTruncated, reported
// as truncated, layers reset; NewPacket never panics.
func TestLayersTruncated(t *testing.T) {
	streams := layerStreams(t)
	seen := map[string]bool{}
	for _, s := range streams[:4] {
		for off := 0; off < len(s.data); {
			var m MPA
			if err := m.DecodeFromBytes(s.data[off:], gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			frame := s.data[off : off+m.FrameLen()]
			kind := "start"
			if m.FPDU != nil {
				var d DDPRDMAP
				_ = d.DecodeFromBytes(m.Payload, gopacket.NilDecodeFeedback)
				kind = d.RDMAP.Opcode().String()
			}
			if !seen[kind] {
				seen[kind] = true
				for n := 0; n < len(frame); n++ {
					var fb truncFeedback
					err := m.DecodeFromBytes(frame[:n], &fb)
					if !errors.Is(err, ErrTruncated) || !fb.truncated || m.FrameLen() != 0 {
						t.Errorf("%s frame cut to %d of %d: err %v, truncated %v", kind, n, len(frame), err, fb.truncated)
					}
					p := gopacket.NewPacket(frame[:n], LayerTypeMPA, gopacket.NoCopy)
					_ = p.Layers()
				}
			}
			off += len(frame)
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) < 3 {
		t.Errorf("only frame kinds %v exercised", keys)
	}
}

// TestLayersBuild builds an FPDU with a CRC from layers and checks it with ParseFPDU and
// the stream decoder.
func TestLayersBuild(t *testing.T) {
	f := RDMAPFields{Opcode: OpSend, Last: true, MSN: 1}
	hdr := make([]byte, DDPUntaggedHeaderLen)
	if _, err := f.Encode(hdr); err != nil {
		t.Fatal(err)
	}
	ddp := &DDPRDMAP{}
	ddp.Contents = hdr
	payload := gopacket.Payload("hello, iwarp") // 12 octets: 2+18+12 = 32, no pad... add one
	payload = append(payload, '!')
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&MPA{UseCRC: true}, ddp, payload)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := ParseFPDU(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(fp) != len(buf.Bytes()) || len(fp.Pad()) != 3 {
		t.Fatalf("FPDU of %d octets (pad %d) in %d", len(fp), len(fp.Pad()), len(buf.Bytes()))
	}
	if err := fp.VerifyCRC(); err != nil || fp.CRC() == 0 {
		t.Fatalf("CRC %#x: %v", fp.CRC(), err)
	}
	d, err := ParseDDP(fp.ULPDU())
	if err != nil || !bytes.Equal(d.Payload(), payload) || d.MSN() != 1 || !d.Last() {
		t.Fatalf("built FPDU decodes as %x (%v)", fp.ULPDU(), err)
	}
}

// FuzzMPALayer: the layers never panic, and a decoded FPDU re-serializes to its octets.
func FuzzMPALayer(f *testing.F) {
	for i, s := range layerStreams(f) {
		if i > 6 {
			break
		}
		var m MPA
		for off := 0; off < len(s.data) && m.DecodeFromBytes(s.data[off:], gopacket.NilDecodeFeedback) == nil; off += m.FrameLen() {
			f.Add(s.data[off : off+m.FrameLen()])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := gopacket.NewPacket(b, LayerTypeMPA, gopacket.NoCopy)
		if p.ErrorLayer() != nil {
			return
		}
		m := p.Layer(LayerTypeMPA).(*MPA)
		buf := gopacket.NewSerializeBuffer()
		var sl []gopacket.SerializableLayer
		for _, l := range p.Layers() {
			sl = append(sl, l.(gopacket.SerializableLayer))
		}
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, sl...); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), b[:m.FrameLen()]) {
			t.Fatalf("re-serialized %x, want %x", buf.Bytes(), b[:m.FrameLen()])
		}
	})
}

// TestLayersRFC7306: the DDP/RDMAP layer takes the Atomic Request, Atomic Response and
// Immediate Data bodies into Contents with a view of each, and a body cut short is a
// truncation error.
func TestLayersRFC7306(t *testing.T) {
	req := AtomicRequest(make([]byte, AtomicRequestLen))
	req.SetOpcode(AtomicFetchAdd)
	req.SetRequestID(5)
	req.SetAddSwapData(3)
	resp := AtomicResponse(make([]byte, AtomicResponseLen))
	resp.SetRequestID(5)
	resp.SetOriginalValue(0x99)
	imm := ImmediateData(make([]byte, ImmediateDataLen))
	imm.SetValue(0xfeedface)
	for _, tc := range []struct {
		op   Opcode
		body []byte
		view func(d *DDPRDMAP) []byte
	}{
		{OpAtomicRequest, req, func(d *DDPRDMAP) []byte { return d.AtomicRequest }},
		{OpAtomicResponse, resp, func(d *DDPRDMAP) []byte { return d.AtomicResponse }},
		{OpImmediateData, imm, func(d *DDPRDMAP) []byte { return d.Immediate }},
		{OpImmediateDataSE, imm, func(d *DDPRDMAP) []byte { return d.Immediate }},
	} {
		f := RDMAPFields{Opcode: tc.op, Last: true, MSN: 1}
		hdr := make([]byte, DDPUntaggedHeaderLen)
		n, err := f.Encode(hdr)
		if err != nil {
			t.Fatal(err)
		}
		seg := append(hdr[:n:n], tc.body...)
		var d DDPRDMAP
		if err := d.DecodeFromBytes(seg, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("%v: %v", tc.op, err)
		}
		if !bytes.Equal(tc.view(&d), tc.body) || len(d.Contents) != len(seg) || len(d.Payload) != 0 {
			t.Errorf("%v: view %x, contents %d of %d octets, payload %d", tc.op, tc.view(&d), len(d.Contents), len(seg), len(d.Payload))
		}
		if err := d.DecodeFromBytes(seg[:len(seg)-1], gopacket.NilDecodeFeedback); !errors.Is(err, ErrTruncated) {
			t.Errorf("%v body one octet short: %v", tc.op, err)
		}
	}
}
