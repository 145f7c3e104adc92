package decode

import (
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// UDP GSO super-datagrams.
//
// The UDP backend sends a run of equal-length RoCEv2 packets as one UDP_SEGMENT
// message (netio.UDPConfig, DisableGSO): the kernel cuts the UDP payload into datagrams
// of the segment size (the last may be shorter) only on its way out of the host. A
// capture taken on the host (tcpdump -i lo, -i any, or on the sending interface
// before segmentation) holds the unsegmented datagram: one UDP payload of several RoCE
// packets, each BTH…ICRC, back to back. Read as one packet it is a wrong ICRC and a
// PSN gap. Each segment's ICRC covers the IP and UDP headers the segment leaves with:
// its own IP and UDP lengths and, for IPv4, Identification (the kernel numbers the
// segments' IDs from the datagram's, one up per segment; the UDP backend computes the
// ICRCs for that: the RoCE device gives a run the IDs 0, 1, ..., see netio.DatagramWriter).

// maxGSOCandidates bounds the segment sizes tried on one datagram: the candidates are
// the offsets where a BTH like the first one (P_Key, transport version, destination QP)
// starts, and the payload could hold that pattern anywhere.
const maxGSOCandidates = 16

// gsoSplit is how a UDP GSO super-datagram splits: count datagrams of size bytes of
// UDP payload, the last one last bytes.
type gsoSplit struct {
	size, count, last int
}

// findGSOSplit finds the segment size of a RoCEv2 frame f whose ICRC is wrong taken
// whole, payload its UDP payload (BTH…ICRC of every segment): the size s at which f's UDP payload cuts into datagrams each of which carries
// its ICRC for the headers it would leave with. ok is false if there is none (the
// frame is damaged, or not a GSO datagram).
func findGSOSplit(f *roce.Frame, payload, scratch []byte) (split gsoSplit, ok bool) {
	if f.Version != roce.RoCEv2 || len(payload) < ibtransport.BTHLen+roce.ICRCLen {
		return split, false
	}
	op := ibtransport.Opcode(payload[0])
	if !op.Valid() {
		return split, false
	}
	minSeg := op.HeaderLen() + roce.ICRCLen
	tries := 0
	for s := (minSeg + 3) &^ 3; s+ibtransport.BTHLen+roce.ICRCLen <= len(payload); s += 4 {
		next := payload[s:]
		// The next segment's BTH: same P_Key (2-3), transport version (low nibble of
		// 1) and destination QP (5-7).
		if next[2] != payload[2] || next[3] != payload[3] || next[1]&0x0f != payload[1]&0x0f ||
			next[5] != payload[5] || next[6] != payload[6] || next[7] != payload[7] {
			continue
		}
		if tries++; tries > maxGSOCandidates {
			return split, false
		}
		sp := gsoSplit{size: s, count: (len(payload) + s - 1) / s}
		sp.last = len(payload) - (sp.count-1)*s
		if sp.last < ibtransport.BTHLen+roce.ICRCLen || sp.last%4 != 0 {
			continue
		}
		good := true
		for j := 0; j < sp.count && good; j++ {
			seg := payload[j*s : min((j+1)*s, len(payload))]
			good = segmentICRCOK(f, seg, j, scratch)
		}
		if good {
			return sp, true
		}
	}
	return split, false
}

// segmentICRCOK reports whether segment j of f's UDP payload (BTH…ICRC) carries the
// ICRC for the IP and UDP headers it leaves with.
func segmentICRCOK(f *roce.Frame, seg []byte, j int, scratch []byte) bool {
	ip, udp := segmentHeaders(f.IP, f.UDP, f.IPv6, len(seg), j, scratch)
	want := binary.LittleEndian.Uint32(seg[len(seg)-roce.ICRCLen:])
	return roce.ComputeICRC(ip, udp, seg[:len(seg)-roce.ICRCLen]) == want
}

// segmentHeaders writes into scratch (at least 60+8 bytes) the IP and UDP headers of
// segment j, of segLen bytes of UDP payload, of the datagram with headers ip0 and udp0:
// theirs with the lengths and, for IPv4, the Identification changed. The checksums are
// left: the ICRC masks them.
func segmentHeaders(ip0, udp0 []byte, ipv6 bool, segLen, j int, scratch []byte) (ip, udp []byte) {
	ip = scratch[:copy(scratch, ip0)]
	udp = scratch[len(ip) : len(ip)+copy(scratch[len(ip):], udp0)]
	if ipv6 {
		header.IPv6(ip).SetPayloadLength(uint16(roce.UDPLen + segLen))
	} else {
		v4 := header.IPv4(ip)
		v4.SetTotalLength(uint16(len(ip) + roce.UDPLen + segLen))
		v4.SetID(header.IPv4(ip0).ID() + uint16(j))
	}
	header.UDP(udp).SetLength(uint16(roce.UDPLen + segLen))
	return ip, udp
}

// splitGSO decodes d.rf, a RoCEv2 frame captured whole whose ICRC is wrong, as a UDP
// GSO super-datagram if it is one: each segment is a packet of its own (on the frame's
// line number), counted in its flow with the length on the wire it leaves with, and a
// note says what the frame is. It reports whether it did.
func (d *decoder) splitGSO(ci gopacket.CaptureInfo) bool {
	f := &d.rf
	if cap(d.gsoScratch) < 2*1024 {
		d.gsoScratch = make([]byte, 2*1024)
	}
	// The UDP payload: roce.Frame gives it without its last four bytes (f.IB) and
	// those as a number (f.ICRC).
	payload := append(d.gsoPayload[:0], f.IB...)
	payload = binary.LittleEndian.AppendUint32(payload, f.ICRC)
	d.gsoPayload = payload
	sp, ok := findGSOSplit(f, payload, d.gsoScratch)
	if !ok {
		return false
	}
	// Each segment as the datagram it leaves as: IP, UDP, BTH…ICRC, decoded by
	// roce.Frame like any other (the IP and UDP headers rebuilt).
	linkLen := d.wire - len(f.IP) - len(f.UDP) - len(f.IB) - roce.ICRCLen
	frame := d.frame
	src, dst := f.Src, f.Dst
	wire, captured := d.wire, d.captured
	if d.gsoFrames.n == 0 {
		d.gsoFirst = fmt.Sprintf("udp %s → %s: %d bytes of UDP payload are %d datagrams of %d bytes (the last %d)",
			src, dst, len(payload), sp.count, sp.size, sp.last)
	}
	d.gsoFrames.add(frame)
	d.gsoDatagrams += sp.count
	// d.rf is overwritten by each segment's decoding: the frame's headers are kept
	// (payload is a copy).
	hdr := append(d.gsoHdr[:0], f.IP...)
	hdr = append(hdr, f.UDP...)
	d.gsoHdr = hdr
	ip0, udp0, ipv6 := hdr[:len(f.IP)], hdr[len(f.IP):], f.IPv6
	for j := 0; j < sp.count; j++ {
		seg := payload[j*sp.size : min((j+1)*sp.size, len(payload))]
		ip, udp := segmentHeaders(ip0, udp0, ipv6, len(seg), j, d.gsoScratch)
		b := d.gsoBuf[:0]
		b = append(b, ip...)
		b = append(b, udp...)
		b = append(b, seg...)
		d.gsoBuf = b
		if err := d.rf.DecodeIP(b); err != nil {
			// Cannot happen: the headers are the frame's, with lengths that fit.
			d.errorf(frame, "udp %s → %s: GSO segment %d: %v", src, dst, j, err)
			continue
		}
		d.wire = linkLen + len(b)
		d.captured = d.wire
		sci := ci
		sci.Length, sci.CaptureLength = d.wire, d.wire
		d.inGSO = true
		d.roce(sci, nil)
		d.inGSO = false
	}
	d.wire, d.captured = wire, captured
	return true
}

// gsoNote is the one note for all the GSO datagrams of the capture, on the first one.
func (d *decoder) gsoNote() {
	if d.gsoFrames.n == 0 {
		return
	}
	what := "are UDP GSO datagrams"
	if d.gsoFrames.n == 1 {
		what = "is a UDP GSO datagram"
	}
	d.notef(d.gsoFrames.frames[0], "%s %s captured before segmentation (on the sending host), %d datagrams once segmented, each decoded as a packet of its own on its frame's line (the first: %s)",
		d.gsoFrames.String(), what, d.gsoDatagrams, d.gsoFirst)
}
