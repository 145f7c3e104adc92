package iwarp

import (
	"bytes"
	"testing"
)

// captureFPDUs returns the start frames and FPDUs (octets as on the wire; no
// capture uses markers) of every connection of a capture, in capture order.
func captureFPDUs(t testing.TB, name string) (frames, fpdus [][]byte) {
	t.Helper()
	negs := map[string]*Negotiation{}
	decs := map[[2]string]*StreamDecoder{}
	for _, s := range readTCPSegments(t, name) {
		key := [2]string{s.conn, string(rune('0' + s.dir))}
		d := decs[key]
		if d == nil {
			n := negs[s.conn]
			if n == nil {
				n = new(Negotiation)
				negs[s.conn] = n
			}
			d = NewStreamDecoder(n, func(r *Record) {
				switch {
				case r.Err != nil:
					t.Errorf("%s: %v", name, r.Err)
				case r.Kind == RecordMPAFrame:
					frames = append(frames, append([]byte(nil), r.MPA...))
				case r.Kind == RecordFPDU:
					fpdus = append(fpdus, append([]byte(nil), r.FPDU...))
				}
			})
			decs[key] = d
		}
		d.Write(s.data)
	}
	return frames, fpdus
}

// TestSiwStartFrames: the start frames softrdma sends with siw-like parameters
// are octet for octet the ones Linux siw sent in the captures: revision 2, H set,
// the IRD/ORD words and nothing else (no RTR bits: siw runs without peer-to-peer
// mode and sends no RTR message; the first FPDU after the Reply is the ULP's).
func TestSiwStartFrames(t *testing.T) {
	for _, c := range []struct {
		capture  string
		crc      CRCPolicy
		ird, ord int
	}{
		{"siw-rping.pcap", CRCAccept, 1, 1},
		{"siw-crc-rping.pcap", CRCRequire, 1, 1},
		{"siw-read-bw.pcap", CRCAccept, 0, 0}, // perftest's first (parameter exchange) connection
	} {
		frames, fpdus := captureFPDUs(t, c.capture)
		if len(frames) < 2 || len(fpdus) == 0 {
			t.Fatalf("%s: %d frames, %d FPDUs", c.capture, len(frames), len(fpdus))
		}
		var req, rep []byte
		for _, f := range frames {
			if MPAFrame(f).IsRequest() && req == nil {
				req = f
			}
			if MPAFrame(f).IsReply() && rep == nil {
				rep = f
			}
		}
		p := ConnParams{CRC: c.crc, NoExtensions: true}
		f, err := requestFrame(&p, c.ird, c.ord)
		if err != nil {
			t.Fatal(err)
		}
		ours, _ := f.Append(nil)
		if !bytes.Equal(ours, req) {
			t.Errorf("%s: our Request %x, siw's %x", c.capture, ours, req)
		}
		v := judgeRequest(&p, MPAFrame(req))
		if v.reject != "" || v.p2p || v.rtr != 0 {
			t.Fatalf("%s: verdict %+v", c.capture, v)
		}
		rf, err := replyFrame(&p, MPAFrame(req), v, c.ird, c.ord, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		ours, _ = rf.Append(nil)
		if !bytes.Equal(ours, rep) {
			t.Errorf("%s: our Reply %x, siw's %x", c.capture, ours, rep)
		}
		neg, _, term, err := negotiateAsInitiator(&p, MPAFrame(req), MPAFrame(rep), c.ird, c.ord)
		if err != nil || term != nil || neg.PeerToPeer || neg.CRC != (c.crc != CRCAccept) || neg.ORD != c.ord {
			t.Fatalf("%s: negotiated %+v, %v", c.capture, neg, err)
		}
	}
}

// TestSiwFPDUFraming: re-framing every FPDU of the siw captures through the
// writer's framing (header copied, payload referenced, pad, CRC32c little-endian)
// gives siw's octets exactly, with CRC off and on; and the MULPDU rule gives
// siw's FPDU size for its MSS.
//
// One difference is siw's, and a fact to keep: siw does not zero pad octets
// (every padded FPDU of the captures has garbage there, e.g. 00 40), and with
// CRC on its CRC covers them as sent. softrdma sends zeros, and its receiver
// takes pad octets as they come, covering them by the CRC (rx.go trailer).
func TestSiwFPDUFraming(t *testing.T) {
	for _, c := range []struct {
		capture string
		crc     bool
	}{{"siw-write-bw.pcap", false}, {"siw-read-bw.pcap", false}, {"siw-crc-write-bw.pcap", true}, {"siw-crc-rping.pcap", true}} {
		_, fpdus := captureFPDUs(t, c.capture)
		maxULPDU := 0
		for i, raw := range fpdus {
			f := FPDU(raw)
			u := f.ULPDU()
			maxULPDU = max(maxULPDU, len(u))
			d := DDP(u)
			hl := d.HeaderLen() + opHeaderLen(RDMAP(d).Opcode())
			if RDMAP(d).Opcode() == OpTerminate {
				hl = len(u)
			}
			tx := newTxState(&Negotiated{CRC: c.crc, MULPDU: MaxULPDULen}, nil)
			hdr := append(make([]byte, FPDUHeaderLen), u[:hl]...)
			tx.fpdu(hdr, [][]byte{u[hl:]})
			var got []byte
			for _, b := range tx.iovBack {
				got = append(got, b...)
			}
			want := raw
			if pad := f.Pad(); len(pad) > 0 && !bytes.Equal(pad, zeroPad[:len(pad)]) {
				want = append([]byte(nil), raw...)
				clear(FPDU(want).Pad())
				if c.crc {
					if f.VerifyCRC() != nil {
						t.Fatalf("%s FPDU %d: siw's CRC does not cover its pad as sent", c.capture, i)
					}
					FPDU(want).SetCRC(FPDU(want).ComputeCRC())
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s FPDU %d: framed %x, siw sent %x", c.capture, i, got, want)
			}
			switch {
			case len(u)-hl > txCopyMax && &tx.iovBack[1][0] != &u[hl]:
				t.Fatalf("%s FPDU %d: the payload of %d octets was copied", c.capture, i, len(u)-hl)
			case len(u)-hl <= txCopyMax && len(tx.iovBack) != 1:
				t.Fatalf("%s FPDU %d: %d iovecs for a payload of %d octets, want it copied (one)", c.capture, i, len(tx.iovBack), len(u)-hl)
			}
		}
		if c.capture == "siw-write-bw.pcap" && (maxULPDU != 1442 || MULPDU(1448, false) != 1442) {
			t.Fatalf("siw's largest ULPDU %d, MULPDU(1448) %d, want 1442", maxULPDU, MULPDU(1448, false))
		}
	}
}

// TestMULPDU: the RFC 5044 sizing fits each FPDU, markers included, in one segment.
func TestMULPDU(t *testing.T) {
	for emss := 536; emss <= 9000; emss++ {
		for _, markers := range []bool{false, true} {
			u := MULPDU(emss, markers)
			n := FPDULen(u)
			if markers {
				worst := 0
				for pos := uint32(0); pos < MarkerInterval; pos += 4 {
					worst = max(worst, MarkedLen(pos, n))
				}
				n = worst
			}
			if n > emss {
				t.Fatalf("EMSS %d markers=%v: MULPDU %d makes %d-octet FPDUs", emss, markers, u, n)
			}
			if !markers && FPDULen(u+4) <= emss {
				t.Fatalf("EMSS %d: MULPDU %d is not the largest", emss, u)
			}
		}
	}
}
