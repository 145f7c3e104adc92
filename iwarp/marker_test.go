package iwarp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

var markerSizes = []int{0, 1, 2, 3, 14, 18, 46, 100, 490, 502, 503, 504, 505, 506, 507, 508,
	509, 510, 511, 512, 513, 1000, 1018, 1022, 1024, 1442, 3000}

// TestMarkers inserts markers into FPDUs at every 4-aligned marker-relative position
// (every alignment to the 512-octet grid, and past a wrap of the 32-bit position), then
// checks the markers' places and pointers, the CRC over the marked octets, and that
// stripping them gives the plain FPDU back, in one piece and in pieces of every size.
func TestMarkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var positions []uint32
	for p := uint32(0); p < 2*MarkerInterval; p += 4 {
		positions = append(positions, p, 0xffffff00+p) // the 32-bit position wraps
	}
	for _, n := range markerSizes {
		ulpdu := make([]byte, n)
		for i := range ulpdu {
			ulpdu[i] = byte(rng.Uint32())
		}
		plain, _ := AppendFPDU(nil, false, ulpdu)
		for _, pos := range positions {
			m, err := AppendMarkedFPDU([]byte{0xee}, pos, true, ulpdu[:n/2], ulpdu[n/2:])
			if err != nil {
				t.Fatal(err)
			}
			m = m[1:]
			if len(m) != MarkedLen(pos, len(plain)) {
				t.Fatalf("n %d pos %d: %d octets, MarkedLen %d", n, pos, len(m), MarkedLen(pos, len(plain)))
			}
			// Markers exactly at the grid positions, none elsewhere.
			hdr := 0
			if pos%MarkerInterval == 0 {
				hdr = MarkerLen
			}
			nm := 0
			for i := 0; i < len(m); i++ {
				if (pos+uint32(i))%MarkerInterval != 0 {
					continue
				}
				nm++
				mk := Marker(m[i : i+MarkerLen])
				want := uint16(0)
				if i > 0 {
					want = uint16(i - hdr)
				}
				if mk.Reserved() != 0 || mk.FPDUPointer() != want {
					t.Fatalf("n %d pos %d: marker at %d: %x, want pointer %d", n, pos, i, []byte(mk), want)
				}
			}
			if len(m) != len(plain)+nm*MarkerLen {
				t.Fatalf("n %d pos %d: %d markers in %d octets", n, pos, nm, len(m))
			}
			s := StripMarkers(nil, m, pos)
			if !bytes.Equal(s[:len(s)-CRCLen], plain[:len(plain)-CRCLen]) {
				t.Fatalf("n %d pos %d: stripped %x\nwant %x", n, pos, s, plain)
			}
			if got, want := FPDU(s).CRC(), UpdateCRC32c(0, m[:len(m)-CRCLen]); got != want {
				t.Fatalf("n %d pos %d: CRC %#x, want %#x over the marked octets", n, pos, got, want)
			}
			if again, _ := InsertMarkers(nil, pos, FPDU(s), true); !bytes.Equal(again, m) {
				t.Fatalf("n %d pos %d: InsertMarkers differs", n, pos)
			}
			if pos%64 == 0 {
				for _, k := range []int{1, 2, 3, 5, 511, 513} {
					var pieces []byte
					for i := 0; i < len(m); i += k {
						pieces = StripMarkers(pieces, m[i:min(i+k, len(m))], pos+uint32(i))
					}
					if !bytes.Equal(pieces, s) {
						t.Fatalf("n %d pos %d: stripped in pieces of %d differs", n, pos, k)
					}
				}
			}
		}
	}
	if _, err := AppendMarkedFPDU(nil, 2, false); !errors.Is(err, ErrBadValue) {
		t.Errorf("unaligned position: %v", err)
	}
	if _, err := AppendMarkedFPDU(nil, 0, false, make([]byte, 70000)); !errors.Is(err, ErrTooLong) {
		t.Errorf("oversized: %v", err)
	}
	if !IsMarkerOctet(1024+3) || IsMarkerOctet(1024+4) {
		t.Error("IsMarkerOctet")
	}
}

// markedStream builds the octets a responder sends when the initiator asked for markers:
// its Reply, then FPDUs with markers (counted from the first octet after the Reply).
func markedStream(t testing.TB, crc bool, sizes []int) (stream []byte, ulpdus [][]byte) {
	t.Helper()
	reply := MPAFrameFields{Revision: 1, CRC: crc}
	stream, _ = reply.Append(nil)
	origin := len(stream)
	for i, n := range sizes {
		f := RDMAPFields{Opcode: OpSend, Last: true, MSN: uint32(i + 1)}
		u := make([]byte, DDPUntaggedHeaderLen+n)
		f.Encode(u)
		for j := DDPUntaggedHeaderLen; j < len(u); j++ {
			u[j] = byte(i + j)
		}
		var err error
		stream, err = AppendMarkedFPDU(stream, uint32(len(stream)-origin), crc, u)
		if err != nil {
			t.Fatal(err)
		}
		ulpdus = append(ulpdus, u)
	}
	return stream, ulpdus
}

func TestStreamMarkers(t *testing.T) {
	sizes := []int{0, 1, 490, 492, 494, 1000, 4000, 3, 505, 7}
	for _, crc := range []bool{false, true} {
		stream, ulpdus := markedStream(t, crc, sizes)
		for _, chunk := range []int{0, 1, 3, 4, 97, 512, 1500} {
			neg := new(Negotiation)
			neg.SetRequest(MPAFlagMarkers, 1) // the initiator wants markers
			var got [][]byte
			var errs []error
			d := NewStreamDecoder(neg, func(r *Record) {
				if r.Err != nil {
					errs = append(errs, r.Err)
				}
				if r.Kind == RecordFPDU {
					got = append(got, append([]byte(nil), r.DDP...))
					if r.CRCChecked != crc {
						t.Errorf("crc %v: CRCChecked %v", crc, r.CRCChecked)
					}
				}
			})
			feedChunks(d, stream, chunk)
			d.Close()
			if len(errs) > 0 || len(got) != len(ulpdus) {
				t.Fatalf("crc %v chunk %d: %d FPDUs, errors %v", crc, chunk, len(got), errs)
			}
			for i := range got {
				if !bytes.Equal(got[i], ulpdus[i]) {
					t.Fatalf("crc %v chunk %d: FPDU %d differs", crc, chunk, i)
				}
			}
		}
	}
	// A wrong FPDU pointer is reported (and, with CRC, so is a flipped payload octet).
	stream, _ := markedStream(t, true, sizes)
	origin := MPAFrameHeaderLen
	for _, tc := range []struct {
		at   int
		want error
	}{
		{origin + 512 + 3, ErrMarkerMismatch}, // pointer of the second marker
		{origin + 600, ErrBadCRC},
	} {
		bad := append([]byte(nil), stream...)
		bad[tc.at] ^= 0x10
		neg := new(Negotiation)
		neg.SetRequest(MPAFlagMarkers, 1)
		var errs []error
		d := NewStreamDecoder(neg, func(r *Record) {
			if r.Err != nil {
				errs = append(errs, r.Err)
			}
		})
		d.Write(bad)
		d.Close()
		if len(errs) != 1 || !errors.Is(errs[0], tc.want) {
			t.Errorf("octet %d flipped: %v, want one %v", tc.at, errs, tc.want)
		}
	}
	// The leading marker of the first FPDU must point at it (0).
	bad := append([]byte(nil), stream...)
	binary.BigEndian.PutUint16(bad[origin+2:], 8)
	neg := new(Negotiation)
	neg.SetRequest(MPAFlagMarkers, 1)
	var errs []error
	d := NewStreamDecoder(neg, func(r *Record) {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	})
	d.Write(bad)
	if len(errs) == 0 || !errors.Is(errs[0], ErrMarkerMismatch) ||
		errs[0].Error() != "marker: FPDU pointer 8 != 0" {
		t.Errorf("leading marker: %v", errs)
	}
}

func feedChunks(d *StreamDecoder, b []byte, chunk int) {
	if chunk == 0 {
		d.Write(b)
		return
	}
	for i := 0; i < len(b); i += chunk {
		d.Write(b[i:min(i+chunk, len(b))])
	}
}
