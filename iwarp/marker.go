package iwarp

import (
	"encoding/binary"

	"github.com/softrdma/softrdma/header"
)

// MPA markers (RFC 5044 §4.3):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           RESERVED            |            FPDUPTR            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// When a direction uses markers, one is inserted every MarkerInterval octets of TCP
// sequence space, counted from the first octet after the sender's own MPA start frame
// (the "marker-relative position" pos of this file is the stream offset minus that
// origin). The first FPDU therefore starts with a marker. FPDUPTR is the number of
// octets from the FPDU's ULPDU_Length field back to the marker; a marker that falls
// exactly on an FPDU boundary precedes that FPDU's header and has FPDUPTR 0 (RFC 5044
// §4.3: "the first MPA Marker has an FPDUPTR value of 0x0000"). Markers are not counted
// by ULPDU_Length, but the CRC covers every marker inside the FPDU, including one that
// precedes its header (as Wireshark's packet-iwarp-mpa.c computes it). Markers never
// split the 4-aligned CRC field; one may sit between the pad and the CRC.
//
// Linux siw does not implement markers (it rejects a request with M), so no capture
// checks this reading; TestMarkers checks the round trip at every alignment.
const (
	// MarkerInterval is the marker spacing in octets of TCP sequence space.
	MarkerInterval = 512
	// MarkerLen is the length of a marker.
	MarkerLen = 4
)

// Marker is a view of one MPA marker.
type Marker []byte

// Reserved returns the reserved half (sent as 0).
func (m Marker) Reserved() uint16 { return binary.BigEndian.Uint16(m) }

// SetReserved sets the reserved half.
func (m Marker) SetReserved(v uint16) { binary.BigEndian.PutUint16(m, v) }

// FPDUPointer returns FPDUPTR: octets from the FPDU header back to this marker.
func (m Marker) FPDUPointer() uint16 { return binary.BigEndian.Uint16(m[2:]) }

// SetFPDUPointer sets FPDUPTR.
func (m Marker) SetFPDUPointer(v uint16) { binary.BigEndian.PutUint16(m[2:], v) }

// IsMarkerOctet reports whether the octet at marker-relative position pos is part of a
// marker.
func IsMarkerOctet(pos uint32) bool { return pos%MarkerInterval < MarkerLen }

// MarkedLen returns how many stream octets an FPDU of fpduLen octets (markers not
// counted) occupies when its first octet is at marker-relative position pos, which must
// be a multiple of 4.
func MarkedLen(pos uint32, fpduLen int) int {
	total := 0
	for fpduLen > 0 {
		if pos%MarkerInterval == 0 {
			total += MarkerLen
			pos += MarkerLen
		}
		k := MarkerInterval - int(pos%MarkerInterval)
		if k > fpduLen {
			k = fpduLen
		}
		total += k
		pos += uint32(k)
		fpduLen -= k
	}
	// A marker due right after the CRC belongs to the next FPDU.
	return total
}

// markedWriter appends FPDU octets to dst, inserting markers.
type markedWriter struct {
	dst     []byte
	pos     uint32 // marker-relative position of the next octet
	hdr     uint32 // position of the ULPDU_Length field
	started bool   // an octet of the FPDU (other than a leading marker) was written
}

func (w *markedWriter) marker() {
	var ptr uint32
	if w.started {
		ptr = w.pos - w.hdr
	}
	w.dst = append(w.dst, 0, 0, byte(ptr>>8), byte(ptr))
	w.pos += MarkerLen
}

func (w *markedWriter) write(b []byte) {
	for len(b) > 0 {
		if w.pos%MarkerInterval == 0 {
			w.marker()
		}
		if !w.started {
			w.hdr = w.pos
			w.started = true
		}
		k := MarkerInterval - int(w.pos%MarkerInterval)
		if k > len(b) {
			k = len(b)
		}
		w.dst = append(w.dst, b[:k]...)
		w.pos += uint32(k)
		b = b[k:]
	}
}

// AppendMarkedFPDU appends to dst an FPDU carrying the concatenation of ulpdu, with
// markers inserted as the FPDU's first octet is at marker-relative position pos (a
// multiple of 4). With crc the CRC is computed over the marked octets (markers included),
// as RFC 5044 §4.4 prescribes. The FPDU occupies MarkedLen(pos, FPDULen(n)) octets.
func AppendMarkedFPDU(dst []byte, pos uint32, crc bool, ulpdu ...[]byte) ([]byte, error) {
	n := 0
	for _, p := range ulpdu {
		n += len(p)
	}
	if n > MaxULPDULen {
		return dst, &header.Error{Header: "fpdu", Field: "ULPDU length", Value: uint64(n),
			Limit: MaxULPDULen, Rel: ">", Err: ErrTooLong}
	}
	if pos%4 != 0 {
		return dst, &header.Error{Header: "marker", Field: "FPDU position", Value: uint64(pos),
			Reason: "not a multiple of 4", Err: ErrBadValue}
	}
	start := len(dst)
	w := markedWriter{dst: dst, pos: pos}
	var hdr [FPDUHeaderLen]byte
	binary.BigEndian.PutUint16(hdr[:], uint16(n))
	w.write(hdr[:])
	for _, p := range ulpdu {
		w.write(p)
	}
	w.write(zeroPad[:PadLen(n)])
	if w.pos%MarkerInterval == 0 {
		w.marker() // between the pad and the CRC
	}
	var c uint32
	if crc {
		c = UpdateCRC32c(0, w.dst[start:])
	}
	return binary.LittleEndian.AppendUint32(w.dst, c), nil
}

// InsertMarkers appends f to dst with markers inserted for marker-relative position pos;
// with crc it recomputes the CRC over the marked octets.
func InsertMarkers(dst []byte, pos uint32, f FPDU, crc bool) ([]byte, error) {
	return AppendMarkedFPDU(dst, pos, crc, f.ULPDU())
}

// StripMarkers appends src to dst without its marker octets; src are stream octets whose
// first is at marker-relative position pos. src may start or end inside a marker, so a
// stream can be stripped in pieces of any size (advance pos by len(src) each time).
func StripMarkers(dst, src []byte, pos uint32) []byte {
	for len(src) > 0 {
		o := int(pos % MarkerInterval)
		if o < MarkerLen {
			k := MarkerLen - o
			if k > len(src) {
				k = len(src)
			}
			src = src[k:]
			pos += uint32(k)
			continue
		}
		k := MarkerInterval - o
		if k > len(src) {
			k = len(src)
		}
		dst = append(dst, src[:k]...)
		src = src[k:]
		pos += uint32(k)
	}
	return dst
}
