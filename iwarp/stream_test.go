package iwarp

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
)

// TestCapturesReencode re-encodes every MPA frame and every FPDU of the captures from
// its decoded fields and compares with the captured octets, CRC included.
func TestCapturesReencode(t *testing.T) {
	nonZeroPads := 0
	defer func() {
		if nonZeroPads == 0 {
			t.Error("no FPDU with a non-zero pad: the pad case went untested")
		}
	}()
	for _, name := range siwCaptures {
		recs := decodeSegments(readTCPSegments(t, name))
		for _, r := range recs {
			switch r.kind {
			case RecordMPAFrame:
				m := MPAFrame(r.mpa)
				f := m.Fields()
				out, err := f.Append(nil)
				if err != nil || !bytes.Equal(out, r.mpa) {
					t.Errorf("%s: MPA frame %x re-encoded as %x, %v", name, r.mpa, out, err)
				}
				// siw: revision 2, enhanced, IRD/ORD words only (rping: 1/1; perftest:
				// 0/0, or 128/128 for ib_read_bw's second connection), no RTR bits.
				w, ok := m.IRDORD()
				if !ok || m.Revision() != MPARevision2 || len(m.PrivateData()) != MPAv2IRDORDLen ||
					w.IRDWord()&^MPAv2IRDORDMask != 0 || w.ORDWord()&^MPAv2IRDORDMask != 0 {
					t.Errorf("%s: frame %x: revision 2 with IRD/ORD expected", name, r.mpa)
				}
			case RecordFPDU:
				fp := FPDU(r.fpdu)
				d := DDP(fp.ULPDU())
				rd := RDMAP(d)
				hdr := make([]byte, d.HeaderLen())
				df := d.Fields()
				if _, err := df.Encode(hdr); err != nil || !bytes.Equal(hdr, d.Header()) {
					t.Errorf("%s: DDP header %x re-encoded as %x", name, d.Header(), hdr)
				}
				rf := RDMAPFields{Opcode: rd.Opcode(), Last: d.Last()}
				if d.Tagged() {
					rf.STag, rf.TO = d.STag(), d.TO()
				} else {
					rf.MSN, rf.MO = d.MSN(), d.MO()
					if rd.Opcode().Invalidates() {
						rf.InvalidateSTag = rd.InvalidateSTag()
					}
				}
				if _, err := rf.Encode(hdr); err != nil || !bytes.Equal(hdr, d.Header()) {
					t.Errorf("%s: %v header %x re-encoded as %x", name, rd.Opcode(), d.Header(), hdr)
				}
				body := d.Payload()
				if rd.Opcode() == OpReadRequest {
					q, err := ParseReadRequest(body)
					if err != nil {
						t.Fatal(err)
					}
					qf := q.Fields()
					out := make([]byte, ReadRequestLen)
					qf.Encode(out)
					if !bytes.Equal(out, q) || len(body) != ReadRequestLen {
						t.Errorf("%s: read request %x re-encoded as %x", name, []byte(q), out)
					}
				}
				out, err := AppendFPDU(nil, r.crcChecked, hdr, body)
				if err != nil {
					t.Fatal(err)
				}
				// siw does not zero the pad (2-octet Sends of perftest carry pad 00 40);
				// the CRC covers the pad as sent.
				if pad := fp.Pad(); !bytes.Equal(pad, make([]byte, len(pad))) {
					nonZeroPads++
					f := FPDU(out)
					copy(f.Pad(), pad)
					if r.crcChecked {
						f.SetCRC(f.ComputeCRC())
					}
				} else {
					head := append([]byte{0, 0}, hdr...)
					FPDU(head).SetULPDULength(fp.ULPDULength())
					if tail := AppendFPDUTrailer(nil, r.crcChecked, head, body); !bytes.Equal(tail, r.fpdu[len(head)+len(body):]) {
						t.Errorf("%s: trailer %x", name, tail)
					}
				}
				if !bytes.Equal(out, r.fpdu) {
					t.Errorf("%s: FPDU %x re-encoded as %x", name, r.fpdu, out)
				}
			}
		}
	}
}

// dirStreams returns, per connection direction, the segments in capture order.
func dirStreams(segs []segment) map[string][][]byte {
	m := map[string][][]byte{}
	for _, s := range segs {
		k := s.conn + "/" + strconv.Itoa(s.dir)
		m[k] = append(m[k], s.data)
	}
	return m
}

func decodeOne(neg *Negotiation, pieces ...[]byte) []decoded {
	var out []decoded
	d := NewStreamDecoder(neg, func(r *Record) { out = append(out, keep("", 0, r)) })
	for _, p := range pieces {
		d.Write(p)
	}
	d.Close()
	return out
}

func join(pieces [][]byte) []byte {
	var b []byte
	for _, p := range pieces {
		b = append(b, p...)
	}
	return b
}

// TestStreamCRCFlip flips one octet inside each FPDU of the CRC captures (in its DDP
// header or payload, so the framing survives) and expects exactly that FPDU to be
// reported with ErrBadCRC.
func TestStreamCRCFlip(t *testing.T) {
	for _, name := range []string{"siw-crc-rping.pcap", "siw-crc-write-bw.pcap"} {
		segs := readTCPSegments(t, name)
		for key, pieces := range dirStreams(segs) {
			stream := join(pieces)
			neg := new(Negotiation)
			neg.SetRequest(MPAFlagCRC, 2)
			neg.SetReply(MPAFlagCRC, 2)
			ref := decodeOne(neg, stream)
			for i, r := range ref {
				if r.kind != RecordFPDU {
					continue
				}
				at := int(r.offset) + 2 + 4 + i%(len(r.fpdu)-2-4-4)
				bad := append([]byte(nil), stream...)
				bad[at] ^= 0x01
				got := decodeOne(neg, bad)
				if len(got) != len(ref) {
					t.Fatalf("%s %s: octet %d flipped: %d records, want %d", name, key, at, len(got), len(ref))
				}
				for j := range got {
					if j == i {
						if !errors.Is(got[j].err, ErrBadCRC) || !got[j].crcChecked {
							t.Errorf("%s %s: octet %d flipped: %v", name, key, at, got[j].err)
						}
					} else if got[j].err != nil {
						t.Errorf("%s %s: octet %d flipped: record %d: %v", name, key, at, j, got[j].err)
					}
				}
			}
		}
	}
}

// TestStreamFramingLost corrupts the ULPDU_Length of an FPDU in the middle of each
// stream and expects the decoder to report lost framing and then decode every FPDU that
// starts after the damage exactly as before.
func TestStreamFramingLost(t *testing.T) {
	for _, name := range siwCaptures {
		segs := readTCPSegments(t, name)
		for key, pieces := range dirStreams(segs) {
			stream := join(pieces)
			ref := decodeOne(nil, stream)
			var fpdus []decoded
			for _, r := range ref {
				if r.kind == RecordFPDU {
					fpdus = append(fpdus, r)
				}
			}
			if len(fpdus) < 6 {
				continue
			}
			victim := fpdus[len(fpdus)/2]
			bad := append([]byte(nil), stream...)
			l := FPDU(bad[victim.offset:]).ULPDULength()
			FPDU(bad[victim.offset:]).SetULPDULength(l + 4)
			damageEnd := victim.offset + uint64(FPDULen(int(l)+4))
			got := decodeOne(nil, pieces[0], bad[len(pieces[0]):])
			lost := false
			byOffset := map[uint64]decoded{}
			for _, r := range got {
				if errors.Is(r.err, ErrFramingLost) {
					lost = true
				}
				if r.kind == RecordFPDU {
					byOffset[r.offset] = r
				}
			}
			if !lost {
				t.Errorf("%s %s: no ErrFramingLost record", name, key)
			}
			for _, r := range fpdus {
				if r.offset < damageEnd {
					continue
				}
				g, ok := byOffset[r.offset]
				if !ok || !bytes.Equal(g.fpdu, r.fpdu) || g.err != nil {
					t.Errorf("%s %s: FPDU at %d (after the damage at %d) not recovered: %v",
						name, key, r.offset, victim.offset, g.err)
				}
			}
		}
	}
}

// TestStreamMidStream starts decoding each direction after the MPA frame, at an FPDU
// boundary or in the middle of an FPDU, as a capture started late would, with the
// capture's segmentation.
func TestStreamMidStream(t *testing.T) {
	for _, name := range siwCaptures {
		segs := readTCPSegments(t, name)
		for key, pieces := range dirStreams(segs) {
			stream := join(pieces)
			ref := decodeOne(nil, pieces...)
			var fpdus []decoded
			crc := false
			for _, r := range ref {
				if r.kind == RecordFPDU {
					fpdus = append(fpdus, r)
					crc = r.crcChecked
				}
			}
			if len(fpdus) < 3 {
				continue
			}
			start := int(fpdus[0].offset)
			for _, cut := range []int{start, start + 1, start + 2, start + 5, int(fpdus[len(fpdus)/2].offset) - 3} {
				// Segments from the cut on, as the capture had them.
				var rest [][]byte
				pos := 0
				for _, p := range pieces {
					if pos+len(p) > cut {
						rest = append(rest, p[max(0, cut-pos):])
					}
					pos += len(p)
				}
				var got []decoded
				d := NewStreamDecoder(nil, func(r *Record) { got = append(got, keep("", 0, r)) })
				for _, p := range rest {
					d.Write(p)
				}
				d.Close()
				if len(got) == 0 || !errors.Is(got[0].err, ErrNoNegotiation) || d.Role() != RoleUnknown {
					t.Fatalf("%s %s cut %d: first record %+v", name, key, cut, got[0])
				}
				// Every FPDU from the first boundary after the cut is decoded as before.
				byOffset := map[uint64]decoded{}
				for _, r := range got[1:] {
					if r.kind == RecordFPDU {
						byOffset[r.offset+uint64(cut)] = r
					} else if !errors.Is(r.err, ErrFramingLost) {
						t.Errorf("%s %s cut %d: %v", name, key, cut, r.err)
					}
				}
				n := 0
				for _, r := range fpdus {
					if r.offset < uint64(cut) {
						continue
					}
					n++
					g, ok := byOffset[r.offset]
					if !ok || !bytes.Equal(g.fpdu, r.fpdu) || g.err != nil || g.crcChecked != crc {
						t.Errorf("%s %s cut %d: FPDU at %d: found %v, err %v, crc %v", name, key, cut,
							r.offset, ok, g.err, g.crcChecked)
					}
				}
				if len(byOffset) != n {
					t.Errorf("%s %s cut %d: %d FPDUs, want %d", name, key, cut, len(byOffset), n)
				}
				_ = stream
			}
		}
	}
}

// TestStreamNegotiationOrder feeds one direction entirely before the other: the decoder
// that needs the peer's frame waits for it, then decodes. Fed alone it decodes on Close.
func TestStreamNegotiationOrder(t *testing.T) {
	for _, name := range siwCaptures {
		segs := readTCPSegments(t, name)
		ref := decodeSegments(segs)
		for _, first := range []int{0, 1} {
			var reordered []segment
			for _, s := range segs {
				if s.dir == first {
					reordered = append(reordered, s)
				}
			}
			for _, s := range segs {
				if s.dir != first {
					reordered = append(reordered, s)
				}
			}
			if got := decodeSegments(reordered); !sameRecords(got, ref) {
				t.Errorf("%s: direction %d first: records differ", name, first)
			}
		}
		// One direction alone: decoded on Close, without the peer's frame.
		for key, pieces := range dirStreams(segs) {
			var want []decoded
			for _, r := range ref {
				if r.conn+"/"+strconv.Itoa(r.dir) == key {
					want = append(want, r)
				}
			}
			got := decodeOne(nil, pieces...)
			if len(want) == 1 { // only the start frame: nothing waited
				if len(got) != 1 || got[0].kind != RecordMPAFrame {
					t.Errorf("%s %s alone: %+v", name, key, got)
				}
				continue
			}
			if len(got) != len(want)+1 || got[0].kind != RecordMPAFrame ||
				!errors.Is(got[1].err, ErrNegotiationIncomplete) {
				t.Fatalf("%s %s alone: %d records, want %d + 1", name, key, len(got), len(want))
			}
			got = append(got[:1], got[2:]...)
			for i := range got {
				got[i].conn, got[i].dir = want[i].conn, want[i].dir
			}
			if !sameRecords(got, want) {
				t.Errorf("%s %s alone: records differ", name, key)
			}
		}
	}
}

func TestStreamEdgeCases(t *testing.T) {
	req := mustHex(t, goldenRequest)
	send := mustHex(t, goldenSendFPDU)
	t.Run("rejected", func(t *testing.T) {
		neg := new(Negotiation)
		rep := MPAFrameFields{Reject: true, Revision: 1}
		b, _ := rep.Append(nil)
		got := decodeOne(neg, b)
		if len(got) != 1 || !neg.Rejected() || neg.Complete() {
			t.Errorf("%+v", got)
		}
		if f, r, ok := neg.Reply(); !ok || f != MPAFlagReject || r != 1 {
			t.Errorf("reply %#x %d %v", f, r, ok)
		}
	})
	t.Run("private data too long", func(t *testing.T) {
		bad := append([]byte(nil), req...)
		MPAFrame(bad).SetPrivateDataLen(600)
		got := decodeOne(nil, bad, send)
		if len(got) < 2 || !errors.Is(got[0].err, ErrTooLong) {
			t.Fatalf("%+v", got)
		}
		if last := got[len(got)-1]; last.kind != RecordFPDU || !bytes.Equal(last.fpdu, send) {
			t.Errorf("the FPDU after the bad frame was not found: %+v", last)
		}
	})
	t.Run("truncated at close", func(t *testing.T) {
		neg := new(Negotiation)
		neg.SetReply(0, 2)
		got := decodeOne(neg, req, send[:7])
		if len(got) != 2 || !errors.Is(got[1].err, ErrTruncated) || got[1].offset != uint64(len(req)) ||
			got[1].length != 7 || got[1].err.Error() != "stream: FPDU length 7 < 40" {
			t.Errorf("%+v", got)
		}
		got = decodeOne(nil, req[:10])
		if len(got) != 1 || !errors.Is(got[0].err, ErrTruncated) {
			t.Errorf("%+v", got)
		}
	})
	t.Run("closed", func(t *testing.T) {
		d := NewStreamDecoder(nil, func(*Record) {})
		d.Close()
		if _, err := d.Write(send); !errors.Is(err, ErrClosed) || d.Close() != nil {
			t.Errorf("write after close: %v", err)
		}
	})
	t.Run("crc detected mid-stream", func(t *testing.T) {
		got := decodeOne(nil, send, send)
		if len(got) != 3 || !got[1].crcChecked || !got[2].crcChecked || got[2].err != nil {
			t.Errorf("%+v", got)
		}
	})
	t.Run("bad header is reported, framing kept by the CRC", func(t *testing.T) {
		neg := new(Negotiation)
		neg.SetReply(MPAFlagCRC, 2)
		f := append([]byte(nil), send...)
		f[3] = 0x4c // opcode 12
		FPDU(f).SetCRC(FPDU(f).ComputeCRC())
		got := decodeOne(neg, req, f, send)
		if len(got) != 3 || !errors.Is(got[1].err, ErrBadOpcode) || got[2].err != nil {
			t.Errorf("%+v", got)
		}
		if d := NewStreamDecoder(nil, nil); d.Negotiation() == nil || d.Offset() != 0 {
			t.Error("accessors")
		}
	})
}

// TestStreamAllocations: decoding an FPDU, whole or split across writes, allocates
// nothing once the reassembly buffer has grown.
func TestStreamAllocations(t *testing.T) {
	send := mustHex(t, goldenSendFPDU)
	rr := mustHex(t, goldenReadRequestFPDU)
	two := append(append([]byte(nil), send...), rr...)
	n := 0
	neg := new(Negotiation)
	neg.SetReply(MPAFlagCRC, 2)
	d := NewStreamDecoder(neg, func(r *Record) {
		if r.Kind == RecordFPDU && r.Err == nil {
			n++
		}
	})
	d.Write(mustHex(t, goldenRequest))
	d.Write(two[:50])
	d.Write(two[50:])
	if a := testing.AllocsPerRun(100, func() { d.Write(send) }); a != 0 {
		t.Errorf("%v allocations per FPDU", a)
	}
	if a := testing.AllocsPerRun(100, func() { d.Write(two[:50]); d.Write(two[50:]) }); a != 0 {
		t.Errorf("%v allocations per split pair of FPDUs", a)
	}
	if n != 2+101+2*101 {
		t.Errorf("%d FPDUs decoded", n)
	}
}

func BenchmarkStreamDecoder(b *testing.B) {
	seg := make([]byte, DDPUntaggedHeaderLen+4096)
	(&RDMAPFields{Opcode: OpSend, Last: true}).Encode(seg)
	f, _ := AppendFPDU(nil, true, seg)
	var stream []byte
	for range 16 {
		stream = append(stream, f...)
	}
	neg := new(Negotiation)
	neg.SetReply(MPAFlagCRC, 2)
	d := NewStreamDecoder(neg, func(r *Record) {
		if r.Kind == RecordError || r.Err != nil {
			b.Fatalf("%v record: %v", r.Kind, r.Err)
		}
	})
	d.Write(mustHex(b, goldenRequest))
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		for i := 0; i < len(stream); i += 1448 {
			d.Write(stream[i:min(i+1448, len(stream))])
		}
	}
}
