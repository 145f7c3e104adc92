package iwarp

import (
	"encoding/binary"

	"github.com/softrdma/softrdma/header"
)

// MPA start frames (RFC 5044 §7.1, RFC 6581 §5):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+         Key (16 bytes containing "MPA ID Req Frame" or        +
//	|                              "MPA ID Rep Frame")              |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|H| Res   |     Rev       |          PD_Length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~                   Private Data (PD_Length octets, ≤ 512)      ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// H is RFC 6581's enhanced-connection-establishment bit (revision 2); RFC 5044 calls those
// four bits Res, which is why tshark 4.0 warns about siw's frames.
const (
	// MPAKeyRequest is the key that starts an MPA Request frame.
	MPAKeyRequest = "MPA ID Req Frame"
	// MPAKeyReply is the key that starts an MPA Reply frame.
	MPAKeyReply = "MPA ID Rep Frame"
	// MPAKeyLen is the length of either key.
	MPAKeyLen = 16
	// MPAFrameHeaderLen is the length of a start frame without private data.
	MPAFrameHeaderLen = 20
	// MPAMaxPrivateData is the largest private data length RFC 5044 §7.1 allows.
	MPAMaxPrivateData = 512

	// MPAFlagMarkers (M): the sender of the frame wants to receive markers.
	MPAFlagMarkers = 0x80
	// MPAFlagCRC (C): the sender of the frame wants CRC32c on the connection.
	MPAFlagCRC = 0x40
	// MPAFlagReject (R): the responder rejects the connection (Reply only).
	MPAFlagReject = 0x20
	// MPAFlagEnhanced (H): RFC 6581 enhanced connection establishment; private data
	// starts with the IRD/ORD words.
	MPAFlagEnhanced = 0x10
	// MPAFlagsReserved are the remaining, reserved flag bits.
	MPAFlagsReserved = 0x0f
	// MPAFlagSiwGSO is the reserved bit Linux siw uses for its non-standard GSO experiment
	// (siw's constant is 0x0800 of the 16-bit flags+revision word, i.e. 0x08 of the flags
	// octet). Not part of any RFC.
	MPAFlagSiwGSO = 0x08

	// MPARevision1 is RFC 5044's revision.
	MPARevision1 = 1
	// MPARevision2 is RFC 6581's revision (what Linux siw sends by default).
	MPARevision2 = 2
)

const (
	mpaFlagsOff = 16
	mpaRevOff   = 17
	mpaPDLenOff = 18
)

// MPAFrame is a view of an MPA Request or Reply frame.
type MPAFrame []byte

// ParseMPAFrame checks that b starts with a complete MPA start frame and returns it (b cut
// to the frame's length; the rest of b is what follows on the stream).
func ParseMPAFrame(b []byte) (MPAFrame, error) {
	if len(b) < MPAFrameHeaderLen {
		return nil, truncated("mpa", "frame length", len(b), MPAFrameHeaderLen)
	}
	m := MPAFrame(b)
	if !m.IsRequest() && !m.IsReply() {
		return nil, &header.Error{Header: "mpa", Field: "key", NoValue: true,
			Reason: quoteKey(b[:MPAKeyLen]), Err: ErrBadKey}
	}
	pd := int(m.PrivateDataLen())
	if pd > MPAMaxPrivateData {
		return nil, &header.Error{Header: "mpa", Field: "private data length", Value: uint64(pd),
			Limit: MPAMaxPrivateData, Rel: ">", Err: ErrTooLong}
	}
	if len(b) < MPAFrameHeaderLen+pd {
		return nil, truncated("mpa", "frame length", len(b), MPAFrameHeaderLen+pd)
	}
	return m[:MPAFrameHeaderLen+pd], nil
}

func quoteKey(k []byte) string {
	s := make([]byte, 0, 2+len(k))
	s = append(s, '"')
	for _, c := range k {
		if c < 0x20 || c > 0x7e {
			c = '.'
		}
		s = append(s, c)
	}
	return string(append(s, '"'))
}

// Key returns the 16-octet key.
func (m MPAFrame) Key() []byte { return m[:MPAKeyLen] }

// IsRequest reports whether the key is "MPA ID Req Frame".
func (m MPAFrame) IsRequest() bool {
	return len(m) >= MPAKeyLen && string(m[:MPAKeyLen]) == MPAKeyRequest
}

// IsReply reports whether the key is "MPA ID Rep Frame".
func (m MPAFrame) IsReply() bool {
	return len(m) >= MPAKeyLen && string(m[:MPAKeyLen]) == MPAKeyReply
}

// SetRequest writes the Request key.
func (m MPAFrame) SetRequest() { copy(m, MPAKeyRequest) }

// SetReply writes the Reply key.
func (m MPAFrame) SetReply() { copy(m, MPAKeyReply) }

// Flags returns the flags octet (M, C, R, H and the reserved bits).
func (m MPAFrame) Flags() uint8 { return m[mpaFlagsOff] }

// SetFlags sets the flags octet.
func (m MPAFrame) SetFlags(f uint8) { m[mpaFlagsOff] = f }

func (m MPAFrame) setFlag(f uint8, v bool) {
	if v {
		m[mpaFlagsOff] |= f
	} else {
		m[mpaFlagsOff] &^= f
	}
}

// Markers returns the M bit: the sender wants markers in the FPDUs it receives.
func (m MPAFrame) Markers() bool { return m[mpaFlagsOff]&MPAFlagMarkers != 0 }

// SetMarkers sets the M bit.
func (m MPAFrame) SetMarkers(v bool) { m.setFlag(MPAFlagMarkers, v) }

// CRC returns the C bit: the sender wants CRC32c.
func (m MPAFrame) CRC() bool { return m[mpaFlagsOff]&MPAFlagCRC != 0 }

// SetCRC sets the C bit.
func (m MPAFrame) SetCRC(v bool) { m.setFlag(MPAFlagCRC, v) }

// Reject returns the R bit: the responder rejects the connection.
func (m MPAFrame) Reject() bool { return m[mpaFlagsOff]&MPAFlagReject != 0 }

// SetReject sets the R bit.
func (m MPAFrame) SetReject(v bool) { m.setFlag(MPAFlagReject, v) }

// Enhanced returns the H bit of RFC 6581 (IRD/ORD words lead the private data).
func (m MPAFrame) Enhanced() bool { return m[mpaFlagsOff]&MPAFlagEnhanced != 0 }

// SetEnhanced sets the H bit.
func (m MPAFrame) SetEnhanced(v bool) { m.setFlag(MPAFlagEnhanced, v) }

// Reserved returns the four reserved flag bits raw (siw's GSO bit is MPAFlagSiwGSO).
func (m MPAFrame) Reserved() uint8 { return m[mpaFlagsOff] & MPAFlagsReserved }

// SetReserved sets the four reserved flag bits.
func (m MPAFrame) SetReserved(v uint8) {
	m[mpaFlagsOff] = m[mpaFlagsOff]&^MPAFlagsReserved | v&MPAFlagsReserved
}

// Revision returns the revision octet.
func (m MPAFrame) Revision() uint8 { return m[mpaRevOff] }

// SetRevision sets the revision octet.
func (m MPAFrame) SetRevision(v uint8) { m[mpaRevOff] = v }

// PrivateDataLen returns the PD_Length field.
func (m MPAFrame) PrivateDataLen() uint16 { return binary.BigEndian.Uint16(m[mpaPDLenOff:]) }

// SetPrivateDataLen sets the PD_Length field.
func (m MPAFrame) SetPrivateDataLen(n uint16) { binary.BigEndian.PutUint16(m[mpaPDLenOff:], n) }

// PrivateData returns the private data (as much of it as the view holds).
func (m MPAFrame) PrivateData() []byte {
	end := MPAFrameHeaderLen + int(m.PrivateDataLen())
	if end > len(m) {
		end = len(m)
	}
	return m[MPAFrameHeaderLen:end]
}

// ULPPrivateData returns the private data the ULP put in the frame: all of it, or
// what follows the RFC 6581 IRD/ORD words when IRDORD finds them.
func (m MPAFrame) ULPPrivateData() []byte {
	pd := m.PrivateData()
	if _, ok := m.IRDORD(); ok {
		return pd[MPAv2IRDORDLen:]
	}
	return pd
}

// Len returns the length of the whole frame according to PD_Length.
func (m MPAFrame) Len() int { return MPAFrameHeaderLen + int(m.PrivateDataLen()) }

// IRDORD returns the RFC 6581 IRD/ORD words that lead the private data when the frame is
// revision 2 with the H bit set and at least 4 octets of private data.
func (m MPAFrame) IRDORD() (MPAv2IRDORD, bool) {
	pd := m.PrivateData()
	if m.Revision() < MPARevision2 || !m.Enhanced() || len(pd) < MPAv2IRDORDLen {
		return nil, false
	}
	return MPAv2IRDORD(pd[:MPAv2IRDORDLen]), true
}

// Fields returns the frame's fields; PrivateData aliases the view.
func (m MPAFrame) Fields() MPAFrameFields {
	return MPAFrameFields{
		Request:     m.IsRequest(),
		Markers:     m.Markers(),
		CRC:         m.CRC(),
		Reject:      m.Reject(),
		Enhanced:    m.Enhanced(),
		Reserved:    m.Reserved(),
		Revision:    m.Revision(),
		PrivateData: m.PrivateData(),
	}
}

// MPAFrameFields holds the fields of an MPA start frame for encoding.
type MPAFrameFields struct {
	// Request selects the Request key; false selects the Reply key.
	Request bool
	// Markers, CRC, Reject and Enhanced are the M, C, R and H bits.
	Markers, CRC, Reject, Enhanced bool
	// Reserved holds the four reserved flag bits (normally 0).
	Reserved uint8
	// Revision is MPARevision1 or MPARevision2.
	Revision uint8
	// PrivateData is at most MPAMaxPrivateData octets; with Enhanced it starts with an
	// MPAv2IRDORD.
	PrivateData []byte
}

// Len returns the encoded length.
func (f *MPAFrameFields) Len() int { return MPAFrameHeaderLen + len(f.PrivateData) }

// Encode writes the frame into b, which must hold f.Len() octets, and returns the
// number of octets written.
func (f *MPAFrameFields) Encode(b []byte) (int, error) {
	if len(f.PrivateData) > MPAMaxPrivateData {
		return 0, &header.Error{Header: "mpa", Field: "private data length",
			Value: uint64(len(f.PrivateData)), Limit: MPAMaxPrivateData, Rel: ">", Err: ErrTooLong}
	}
	n := f.Len()
	if len(b) < n {
		return 0, truncated("mpa", "buffer length", len(b), n)
	}
	m := MPAFrame(b)
	if f.Request {
		m.SetRequest()
	} else {
		m.SetReply()
	}
	var flags uint8
	if f.Markers {
		flags |= MPAFlagMarkers
	}
	if f.CRC {
		flags |= MPAFlagCRC
	}
	if f.Reject {
		flags |= MPAFlagReject
	}
	if f.Enhanced {
		flags |= MPAFlagEnhanced
	}
	m.SetFlags(flags | f.Reserved&MPAFlagsReserved)
	m.SetRevision(f.Revision)
	m.SetPrivateDataLen(uint16(len(f.PrivateData)))
	copy(b[MPAFrameHeaderLen:], f.PrivateData)
	return n, nil
}

// Append appends the encoded frame to dst.
func (f *MPAFrameFields) Append(dst []byte) ([]byte, error) {
	n := f.Len()
	dst, b := grow(dst, n)
	if _, err := f.Encode(b); err != nil {
		return dst[:len(dst)-n], err
	}
	return dst, nil
}

// grow extends dst by n octets and returns the extended slice and the new tail.
func grow(dst []byte, n int) ([]byte, []byte) {
	l := len(dst)
	if cap(dst)-l < n {
		nd := make([]byte, l, 2*cap(dst)+n)
		copy(nd, dst)
		dst = nd
	}
	dst = dst[:l+n]
	return dst, dst[l:]
}

// RFC 6581 §9.1 IRD/ORD words, the first 4 octets of the private data in enhanced mode:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|P|Z|           IRD             |W|R|          ORD              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// P = peer-to-peer, Z = zero-length FPDU as RTR, W = zero-length RDMA Write as RTR,
// R = zero-length RDMA Read as RTR. siw sends 0x0001 0x0001 (IRD 1, ORD 1, no RTR) in the captures.
const (
	// MPAv2IRDORDLen is the length of the IRD/ORD words.
	MPAv2IRDORDLen = 4
	// MPAv2PeerToPeer is the P bit of the IRD word.
	MPAv2PeerToPeer = 0x8000
	// MPAv2ZeroLengthRTR is the Z bit of the IRD word.
	MPAv2ZeroLengthRTR = 0x4000
	// MPAv2WriteRTR is the W bit of the ORD word.
	MPAv2WriteRTR = 0x8000
	// MPAv2ReadRTR is the R bit of the ORD word.
	MPAv2ReadRTR = 0x4000
	// MPAv2IRDORDMask masks the 14-bit IRD and ORD values.
	MPAv2IRDORDMask = 0x3fff
)

// MPAv2IRDORD is a view of the RFC 6581 IRD/ORD words (4 octets).
type MPAv2IRDORD []byte

// IRDWord returns the raw 16-bit IRD word (P, Z, IRD).
func (w MPAv2IRDORD) IRDWord() uint16 { return binary.BigEndian.Uint16(w) }

// SetIRDWord sets the raw 16-bit IRD word.
func (w MPAv2IRDORD) SetIRDWord(v uint16) { binary.BigEndian.PutUint16(w, v) }

// ORDWord returns the raw 16-bit ORD word (W, R, ORD).
func (w MPAv2IRDORD) ORDWord() uint16 { return binary.BigEndian.Uint16(w[2:]) }

// SetORDWord sets the raw 16-bit ORD word.
func (w MPAv2IRDORD) SetORDWord(v uint16) { binary.BigEndian.PutUint16(w[2:], v) }

func (w MPAv2IRDORD) setBit(off int, bit uint16, v bool) {
	x := binary.BigEndian.Uint16(w[off:])
	if v {
		x |= bit
	} else {
		x &^= bit
	}
	binary.BigEndian.PutUint16(w[off:], x)
}

// IRD returns the 14-bit inbound RDMA read queue depth.
func (w MPAv2IRDORD) IRD() uint16 { return w.IRDWord() & MPAv2IRDORDMask }

// SetIRD sets the 14-bit IRD value, keeping the P and Z bits.
func (w MPAv2IRDORD) SetIRD(v uint16) {
	w.SetIRDWord(w.IRDWord()&^MPAv2IRDORDMask | v&MPAv2IRDORDMask)
}

// ORD returns the 14-bit outbound RDMA read queue depth.
func (w MPAv2IRDORD) ORD() uint16 { return w.ORDWord() & MPAv2IRDORDMask }

// SetORD sets the 14-bit ORD value, keeping the W and R bits.
func (w MPAv2IRDORD) SetORD(v uint16) {
	w.SetORDWord(w.ORDWord()&^MPAv2IRDORDMask | v&MPAv2IRDORDMask)
}

// PeerToPeer returns the P bit (IRD word 0x8000).
func (w MPAv2IRDORD) PeerToPeer() bool { return w.IRDWord()&MPAv2PeerToPeer != 0 }

// SetPeerToPeer sets the P bit.
func (w MPAv2IRDORD) SetPeerToPeer(v bool) { w.setBit(0, MPAv2PeerToPeer, v) }

// ZeroLengthRTR returns the Z bit (IRD word 0x4000).
func (w MPAv2IRDORD) ZeroLengthRTR() bool { return w.IRDWord()&MPAv2ZeroLengthRTR != 0 }

// SetZeroLengthRTR sets the Z bit.
func (w MPAv2IRDORD) SetZeroLengthRTR(v bool) { w.setBit(0, MPAv2ZeroLengthRTR, v) }

// WriteRTR returns the W bit (ORD word 0x8000).
func (w MPAv2IRDORD) WriteRTR() bool { return w.ORDWord()&MPAv2WriteRTR != 0 }

// SetWriteRTR sets the W bit.
func (w MPAv2IRDORD) SetWriteRTR(v bool) { w.setBit(2, MPAv2WriteRTR, v) }

// ReadRTR returns the R bit (ORD word 0x4000).
func (w MPAv2IRDORD) ReadRTR() bool { return w.ORDWord()&MPAv2ReadRTR != 0 }

// SetReadRTR sets the R bit.
func (w MPAv2IRDORD) SetReadRTR(v bool) { w.setBit(2, MPAv2ReadRTR, v) }
