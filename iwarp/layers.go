package iwarp

import (
	"encoding/binary"
	"errors"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/header"
)

// gopacket layers for iWARP. They are thin adapters over ParseMPAFrame, ParseFPDU,
// ParseDDP, ParseRDMAP, ParseReadRequest and ParseTerminate, keeping the views those
// return (sub-slices of the data, no copies); a DecodingLayerParser over them allocates
// nothing.
//
// MPA has no port of its own, so nothing is registered with TCP: decode a reassembled
// TCP stream (one direction's octets, in order, markers removed) with
//
//	p := gopacket.NewPacket(stream, iwarp.LayerTypeMPA, gopacket.Default)
//
// which yields MPA (a start frame, or an FPDU), then for an FPDU DDPRDMAP and the DDP
// payload. One packet is one MPA frame: the octets after it are not part of it, and
// MPA.FrameLen tells where the next one starts. The StreamDecoder is the tool for whole
// streams (markers, CRC negotiation, resynchronisation).
//
// Serializing the decoded layers gives back the frame: the MPA layer prepends the
// ULPDU_Length and appends the pad and CRC around the DDP segment serialized before it.
// With SerializeOptions.FixLengths it computes the ULPDU_Length and pad, and with
// ComputeChecksums and UseCRC the CRC32c.

// Layer type numbers, in gopacket's range for application layers (1000-1999).
const (
	layerNumMPA      = 1793
	layerNumDDPRDMAP = 1794
)

// Layer types of the iWARP layers, registered by init.
var (
	// LayerTypeMPA is an MPA start frame or FPDU (RFC 5044).
	LayerTypeMPA gopacket.LayerType
	// LayerTypeDDPRDMAP is a DDP segment header with its RDMAP fields (RFC 5041, 5040).
	LayerTypeDDPRDMAP gopacket.LayerType
)

func init() {
	LayerTypeMPA = gopacket.RegisterLayerType(layerNumMPA, gopacket.LayerTypeMetadata{
		Name: "MPA", Decoder: gopacket.DecodeFunc(decodeMPALayer)})
	LayerTypeDDPRDMAP = gopacket.RegisterLayerType(layerNumDDPRDMAP, gopacket.LayerTypeMetadata{
		Name: "DDPRDMAP", Decoder: gopacket.DecodeFunc(decodeDDPRDMAPLayer)})
}

func markTruncated(df gopacket.DecodeFeedback, err error) {
	if errors.Is(err, ErrTruncated) {
		df.SetTruncated()
	}
}

// MPA is one MPA frame as a gopacket layer (see MPAFrame and FPDU for the bit diagrams).
// For a start frame (Request or Reply) Contents is its 20-octet header and Payload its
// private data. For an FPDU Contents is the ULPDU_Length field, Payload the ULPDU (the
// DDP segment) and Trailer the pad and the CRC.
type MPA struct {
	layers.BaseLayer
	// Start is the start frame (nil for an FPDU).
	Start MPAFrame
	// FPDU is the FPDU (nil for a start frame).
	FPDU FPDU
	// Trailer is the FPDU's pad octets and 4-octet CRC field.
	Trailer []byte
	// UseCRC makes SerializeTo compute the CRC32c when ComputeChecksums is set (the
	// connection negotiated CRCs). DecodeFromBytes sets it when the CRC field is not 0.
	UseCRC bool
}

// LayerType returns LayerTypeMPA.
func (m *MPA) LayerType() gopacket.LayerType { return LayerTypeMPA }

// CanDecode returns LayerTypeMPA.
func (m *MPA) CanDecode() gopacket.LayerClass { return LayerTypeMPA }

// NextLayerType returns LayerTypeDDPRDMAP after an FPDU, gopacket.LayerTypePayload after
// a start frame with private data.
func (m *MPA) NextLayerType() gopacket.LayerType {
	switch {
	case m.FPDU != nil:
		return LayerTypeDDPRDMAP
	case len(m.Payload) > 0:
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// FrameLen returns the number of stream octets the frame occupies (start frame with
// private data, or FPDU with pad and CRC); 0 before a successful decode.
func (m *MPA) FrameLen() int {
	if m.Start != nil {
		return len(m.Start)
	}
	return len(m.FPDU)
}

// DecodeFromBytes decodes the MPA frame at the start of data, resetting m first: a start
// frame if data begins with an MPA key, else an FPDU. Octets after the frame are ignored.
func (m *MPA) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*m = MPA{}
	if len(data) >= 2 && keyPrefix(data) {
		f, err := ParseMPAFrame(data)
		if err != nil {
			markTruncated(df, err)
			return err
		}
		m.Start = f
		m.Contents = f[:MPAFrameHeaderLen:MPAFrameHeaderLen]
		m.Payload = f[MPAFrameHeaderLen:]
		return nil
	}
	f, err := ParseFPDU(data)
	if err != nil {
		markTruncated(df, err)
		return err
	}
	n := int(f.ULPDULength())
	m.FPDU = f
	m.Contents = f[:FPDUHeaderLen:FPDUHeaderLen]
	m.Payload = f[FPDUHeaderLen : FPDUHeaderLen+n : FPDUHeaderLen+n]
	m.Trailer = f[FPDUHeaderLen+n:]
	m.UseCRC = f.CRC() != 0
	return nil
}

// VerifyCRC checks the CRC32c of a decoded FPDU (meaningful only if the connection
// negotiated CRCs: otherwise the field is 0). It returns an error matching ErrBadCRC on
// a mismatch, nil for a start frame.
func (m *MPA) VerifyCRC() error {
	if m.FPDU == nil {
		return nil
	}
	return m.FPDU.VerifyCRC()
}

// SerializeTo writes the frame around the bytes already in b (the DDP segment, or the
// private data). A start frame's header is m.Start's first 20 octets (a decoded frame,
// or one written with MPAFrameFields.Encode); with FixLengths its private data length is
// set. An FPDU gets its ULPDU_Length (computed with FixLengths or when building, m.FPDU
// nil), its pad (the decoded octets if there are as many, else zeros) and its CRC: computed with ComputeChecksums and
// UseCRC, else the decoded one (0 when building).
func (m *MPA) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	n := len(b.Bytes())
	if m.Start != nil {
		if len(m.Start) < MPAFrameHeaderLen {
			return truncated("mpa", "frame length", len(m.Start), MPAFrameHeaderLen)
		}
		hdr, err := b.PrependBytes(MPAFrameHeaderLen)
		if err != nil {
			return err
		}
		copy(hdr, m.Start[:MPAFrameHeaderLen])
		if opts.FixLengths {
			MPAFrame(hdr).SetPrivateDataLen(uint16(n))
		}
		return nil
	}
	if n > MaxULPDULen {
		return &header.Error{Header: "fpdu", Field: "ULPDU length", Value: uint64(n),
			Limit: MaxULPDULen, Rel: ">", Err: ErrTooLong}
	}
	hdr, err := b.PrependBytes(FPDUHeaderLen)
	if err != nil {
		return err
	}
	if m.FPDU != nil && !opts.FixLengths {
		copy(hdr, m.FPDU[:FPDUHeaderLen])
	} else {
		binary.BigEndian.PutUint16(hdr, uint16(n))
	}
	pad := PadLen(int(binary.BigEndian.Uint16(hdr)))
	t, err := b.AppendBytes(pad + CRCLen)
	if err != nil {
		return err
	}
	clear(t)
	switch {
	case len(m.Trailer) == pad+CRCLen:
		// Keep decoded pad octets: Linux siw does not zero them (siw-crc-write-bw
		// has FPDUs with pad 00 40), and the CRC covers them.
		copy(t, m.Trailer)
	case len(m.Trailer) >= CRCLen:
		copy(t[pad:], m.Trailer[len(m.Trailer)-CRCLen:])
	}
	if opts.ComputeChecksums && m.UseCRC {
		f := FPDU(b.Bytes())
		f.SetCRC(f.ComputeCRC())
	}
	return nil
}

func decodeMPALayer(data []byte, p gopacket.PacketBuilder) error {
	m := &MPA{}
	if err := m.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(m)
	return p.NextDecoder(m.NextLayerType())
}

// DDPRDMAP is a DDP segment as a gopacket layer: the DDP header with the RDMAP control
// octet in it (RFC 5041 §5, RFC 5040 §4; see DDP for the bit diagram), followed for a
// Read Request by its 28-octet header, for a Terminate by the Terminate message and for
// the RFC 7306 opcodes by the Atomic Request, Atomic Response or Immediate Data body.
// Contents is those headers, Payload the data after them.
type DDPRDMAP struct {
	layers.BaseLayer
	// DDP is the segment (header and payload).
	DDP DDP
	// RDMAP views the RDMAP fields of the DDP header.
	RDMAP RDMAP
	// ReadRequest is the Read Request header (RDMA Read Request only).
	ReadRequest ReadRequest
	// Terminate is the Terminate message (Terminate only).
	Terminate Terminate
	// AtomicRequest, AtomicResponse and Immediate are the RFC 7306 bodies (Atomic
	// Request, Atomic Response, Immediate Data with or without SE only).
	AtomicRequest  AtomicRequest
	AtomicResponse AtomicResponse
	Immediate      ImmediateData
}

// LayerType returns LayerTypeDDPRDMAP.
func (d *DDPRDMAP) LayerType() gopacket.LayerType { return LayerTypeDDPRDMAP }

// CanDecode returns LayerTypeDDPRDMAP.
func (d *DDPRDMAP) CanDecode() gopacket.LayerClass { return LayerTypeDDPRDMAP }

// NextLayerType returns gopacket.LayerTypePayload if data follows the headers.
func (d *DDPRDMAP) NextLayerType() gopacket.LayerType {
	if len(d.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes a DDP segment (an FPDU's ULPDU), resetting d first: ParseDDP,
// ParseRDMAP, and the Read Request, Terminate or RFC 7306 header when the opcode has one.
func (d *DDPRDMAP) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*d = DDPRDMAP{}
	seg, err := ParseDDP(data)
	if err != nil {
		markTruncated(df, err)
		return err
	}
	r, err := ParseRDMAP(seg)
	if err != nil {
		return err
	}
	hl := seg.HeaderLen()
	payload := seg.Payload()
	switch r.Opcode() {
	case OpReadRequest:
		rr, err := ParseReadRequest(payload)
		if err != nil {
			markTruncated(df, err)
			return err
		}
		d.ReadRequest = rr
		hl += len(rr)
	case OpTerminate:
		t, err := ParseTerminate(payload)
		if err != nil {
			markTruncated(df, err)
			return err
		}
		d.Terminate = t
		hl += len(t)
	case OpAtomicRequest:
		a, err := ParseAtomicRequest(payload)
		if err != nil {
			markTruncated(df, err)
			return err
		}
		d.AtomicRequest = a
		hl += len(a)
	case OpAtomicResponse:
		a, err := ParseAtomicResponse(payload)
		if err != nil {
			markTruncated(df, err)
			return err
		}
		d.AtomicResponse = a
		hl += len(a)
	case OpImmediateData, OpImmediateDataSE:
		im, err := ParseImmediateData(payload)
		if err != nil {
			markTruncated(df, err)
			return err
		}
		d.Immediate = im
		hl += len(im)
	}
	d.DDP, d.RDMAP = seg, r
	d.Contents = data[:hl:hl]
	d.Payload = data[hl:]
	return nil
}

// SerializeTo prepends the header octets (Contents: decoded, or written with
// RDMAPFields.Encode followed by any Read Request, Terminate or RFC 7306 header).
func (d *DDPRDMAP) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if len(d.Contents) < DDPTaggedHeaderLen {
		return truncated("ddp", "header length", len(d.Contents), DDPTaggedHeaderLen)
	}
	hdr, err := b.PrependBytes(len(d.Contents))
	if err != nil {
		return err
	}
	copy(hdr, d.Contents)
	return nil
}

func decodeDDPRDMAPLayer(data []byte, p gopacket.PacketBuilder) error {
	d := &DDPRDMAP{}
	if err := d.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(d)
	return p.NextDecoder(d.NextLayerType())
}

// Compile-time checks that the layers implement the gopacket interfaces.
var (
	_ gopacket.DecodingLayer     = (*MPA)(nil)
	_ gopacket.SerializableLayer = (*MPA)(nil)
	_ gopacket.DecodingLayer     = (*DDPRDMAP)(nil)
	_ gopacket.SerializableLayer = (*DDPRDMAP)(nil)
)
