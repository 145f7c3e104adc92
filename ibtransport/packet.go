package ibtransport

import (
	"slices"

	"github.com/softrdma/softrdma/header"
)

// Packet is a decoded IB transport packet: views of the BTH and of each extension
// header the opcode carries, the payload and the pad. Every field is a sub-slice of
// the buffer given to Decode (no copies), so it is valid only as long as that buffer
// is, and writing through a view changes the buffer. A header the opcode does not
// carry is nil.
type Packet struct {
	// BTH is the Base Transport Header.
	BTH BTH
	// RDETH is the Reliable Datagram ETH (RD only).
	RDETH RDETH
	// DETH is the Datagram ETH (UD, and RD requests).
	DETH DETH
	// XRCETH is the XRC ETH (XRC requests).
	XRCETH XRCETH
	// FETH is the FLUSH ETH.
	FETH FETH
	// RETH is the RDMA ETH (WRITE First/Only, READ Request, FLUSH, ATOMIC WRITE).
	RETH RETH
	// AtomicETH is the Atomic ETH (CmpSwap, FetchAdd).
	AtomicETH AtomicETH
	// AETH is the ACK ETH (Acknowledge, ATOMIC Acknowledge, READ response
	// First/Last/Only).
	AETH AETH
	// AtomicAckETH is the Atomic ACK ETH (ATOMIC Acknowledge).
	AtomicAckETH AtomicAckETH
	// ImmDt is the immediate data (opcodes "with Immediate").
	ImmDt ImmDt
	// IETH is the Invalidate ETH (SEND with Invalidate).
	IETH IETH
	// AtomicWrite is the 8-byte value of an ATOMIC WRITE; it is the same bytes as
	// Payload.
	AtomicWrite AtomicWriteData
	// Payload is the payload without the pad bytes; nil if the opcode carries no
	// payload, empty (not nil) for a zero-length payload.
	Payload []byte
	// Pad holds the BTH.PadCount() pad bytes that follow the payload.
	Pad []byte
}

// Header names used in errors, indexed like extHeaderLens.
var extHeaderErrNames = [numExtHeaders]string{
	"rdeth", "deth", "xrceth", "feth", "reth", "atomiceth",
	"aeth", "atomicacketh", "immdt", "ieth", "cnp",
}

// Decode decodes b, which runs from the first byte of the BTH to the last byte of
// the pad (the RoCE layer has already removed the ICRC). It fully resets p first,
// points p's fields into b without copying and allocates nothing. It checks that b
// holds the BTH and every extension header of the opcode, that the opcode is valid
// and the transport header version is 0, that the pad count does not exceed the
// bytes after the headers, that an opcode without payload carries nothing but its
// pad, and that an ATOMIC WRITE carries exactly 8 bytes. It does not check the ICRC,
// the payload length against the path MTU, or the 4-byte alignment of the payload
// (rxe does not check it either). On error p is left zero.
func (p *Packet) Decode(b []byte) error {
	*p = Packet{}
	if len(b) < BTHLen {
		return &header.Error{Header: "bth", Field: "packet length", Value: uint64(len(b)),
			Rel: "<", Limit: BTHLen, Err: ErrTruncated}
	}
	bth := BTH(b[:BTHLen:BTHLen])
	op := bth.Opcode()
	e := &opcodeTable[op]
	if e.flags&opValid == 0 {
		return &header.Error{Header: "bth", Field: "opcode", Value: uint64(op), Hex: 2,
			Reason: "reserved " + op.Service().String() + " opcode", Err: ErrInvalidOpcode}
	}
	if tv := bth.TVer(); tv != 0 {
		return &header.Error{Header: "bth", Field: "transport header version", Value: uint64(tv),
			Rel: "!=", Limit: 0, Err: ErrInvalidField}
	}
	hl := int(e.hdrLen)
	if len(b) < hl {
		return truncatedExtHeader(op, len(b))
	}
	rest := b[hl:]
	pad := int(bth.PadCount())
	if pad > len(rest) {
		return &header.Error{Header: "bth", Field: "pad count", Value: uint64(pad),
			Rel: ">", Limit: uint64(len(rest)), Reason: "bytes after the headers", Err: ErrInvalidField}
	}
	n := len(rest) - pad
	hasPayload := e.flags&opPayload != 0
	if !hasPayload && n != 0 {
		return &header.Error{Header: "bth", Field: "payload length", Value: uint64(n),
			Rel: "!=", Limit: 0, Reason: op.String() + " carries no payload", Err: ErrUnexpectedPayload}
	}
	if e.flags&opAtomicWrite != 0 && n != AtomicWriteDataLen {
		return &header.Error{Header: "atomic write", Field: "payload length", Value: uint64(n),
			Rel: "!=", Limit: AtomicWriteDataLen, Err: ErrUnexpectedPayload}
	}

	p.BTH = bth
	if ext := e.ext; ext != 0 {
		o := &e.offsets
		if ext&ExtRDETH != 0 {
			p.RDETH = RDETH(sub(b, o[0], RDETHLen))
		}
		if ext&ExtDETH != 0 {
			p.DETH = DETH(sub(b, o[1], DETHLen))
		}
		if ext&ExtXRCETH != 0 {
			p.XRCETH = XRCETH(sub(b, o[2], XRCETHLen))
		}
		if ext&ExtFETH != 0 {
			p.FETH = FETH(sub(b, o[3], FETHLen))
		}
		if ext&ExtRETH != 0 {
			p.RETH = RETH(sub(b, o[4], RETHLen))
		}
		if ext&ExtAtomicETH != 0 {
			p.AtomicETH = AtomicETH(sub(b, o[5], AtomicETHLen))
		}
		if ext&ExtAETH != 0 {
			p.AETH = AETH(sub(b, o[6], AETHLen))
		}
		if ext&ExtAtomicAckETH != 0 {
			p.AtomicAckETH = AtomicAckETH(sub(b, o[7], AtomicAckETHLen))
		}
		if ext&ExtImmDt != 0 {
			p.ImmDt = ImmDt(sub(b, o[8], ImmDtLen))
		}
		if ext&ExtIETH != 0 {
			p.IETH = IETH(sub(b, o[9], IETHLen))
		}
	}
	if hasPayload {
		p.Payload = rest[:n:n]
		if e.flags&opAtomicWrite != 0 {
			p.AtomicWrite = AtomicWriteData(p.Payload)
		}
	}
	if pad > 0 {
		p.Pad = rest[n:]
	}
	return nil
}

// sub returns b[off:off+n] with its capacity cut to n, so that an append to a view
// cannot overwrite the next header.
func sub(b []byte, off uint8, n int) []byte {
	o := int(off)
	return b[o : o+n : o+n]
}

// truncatedExtHeader names the first header of op that does not fit in n bytes.
func truncatedExtHeader(op Opcode, n int) error {
	e := &opcodeTable[op]
	name := "bth"
	for i := range numExtHeaders {
		if e.ext&(1<<i) != 0 && int(e.offsets[i])+int(extHeaderLens[i]) > n {
			name = extHeaderErrNames[i]
			break
		}
	}
	return &header.Error{Header: name, Field: "packet length", Value: uint64(n),
		Rel: "<", Limit: uint64(e.hdrLen), Reason: op.String(), Err: ErrTruncated}
}

// Opcode returns the opcode of a decoded packet (0 if p holds no packet).
func (p *Packet) Opcode() Opcode {
	if len(p.BTH) < BTHLen {
		return 0
	}
	return p.BTH.Opcode()
}

// HeaderLen returns the length of the BTH and the extension headers of the decoded
// packet: the offset of its payload. It is 0 if p holds no packet.
func (p *Packet) HeaderLen() int {
	if len(p.BTH) < BTHLen {
		return 0
	}
	return p.BTH.Opcode().HeaderLen()
}

// Fields copies the header fields of the decoded packet into f; the fields of
// headers the opcode does not carry are zero.
func (p *Packet) Fields(f *PacketFields) {
	*f = PacketFields{}
	if len(p.BTH) < BTHLen {
		return
	}
	f.BTH = p.BTH.Fields()
	if p.RDETH != nil {
		f.EEContext = p.RDETH.EEContext()
	}
	if p.DETH != nil {
		f.DETH = DETHFields{QKey: p.DETH.QKey(), SrcQP: p.DETH.SrcQP()}
	}
	if p.XRCETH != nil {
		f.XRCSRQ = p.XRCETH.XRCSRQ()
	}
	if p.FETH != nil {
		f.FETH = FETHFields{PlacementType: p.FETH.PlacementType(), SelectivityLevel: p.FETH.SelectivityLevel()}
	}
	if p.RETH != nil {
		f.RETH = RETHFields{VA: p.RETH.VA(), RKey: p.RETH.RKey(), DMALen: p.RETH.DMALen()}
	}
	if p.AtomicETH != nil {
		f.AtomicETH = AtomicETHFields{VA: p.AtomicETH.VA(), RKey: p.AtomicETH.RKey(),
			SwapAdd: p.AtomicETH.SwapAdd(), Compare: p.AtomicETH.Compare()}
	}
	if p.AETH != nil {
		f.AETH = AETHFields{Syndrome: p.AETH.Syndrome(), MSN: p.AETH.MSN()}
	}
	if p.AtomicAckETH != nil {
		f.AtomicAckOrigData = p.AtomicAckETH.OrigData()
	}
	if p.ImmDt != nil {
		f.Immediate = p.ImmDt.Immediate()
	}
	if p.IETH != nil {
		f.InvalidateRKey = p.IETH.RKey()
	}
}

// PacketFields holds the fields of the BTH and of every extension header, for
// encoding a packet's headers. Which headers are written is decided by BTH.Opcode
// alone; the fields of the others are ignored. Reserved bits are written as 0. The
// payload (including an ATOMIC WRITE's 8 bytes), the pad and the ICRC are the
// caller's: they follow the headers.
type PacketFields struct {
	// BTH holds the Base Transport Header fields.
	BTH BTHFields
	// EEContext is the RDETH's 24-bit EE context.
	EEContext uint32
	// DETH holds the Datagram ETH fields.
	DETH DETHFields
	// XRCSRQ is the XRCETH's 24-bit XRC SRQ number.
	XRCSRQ uint32
	// FETH holds the FLUSH ETH fields.
	FETH FETHFields
	// RETH holds the RDMA ETH fields.
	RETH RETHFields
	// AtomicETH holds the Atomic ETH fields.
	AtomicETH AtomicETHFields
	// AETH holds the ACK ETH fields.
	AETH AETHFields
	// AtomicAckOrigData is the AtomicAckETH's original remote data.
	AtomicAckOrigData uint64
	// Immediate is the ImmDt value.
	Immediate uint32
	// InvalidateRKey is the IETH's R_Key.
	InvalidateRKey uint32
}

// HeaderLen returns the number of bytes EncodeHeaders writes.
func (f *PacketFields) HeaderLen() int { return f.BTH.Opcode.HeaderLen() }

// Validate reports the first field that does not fit the wire format: an invalid
// opcode, a bad BTH field (see BTHFields.Validate), or a value wider than its field
// in one of the extension headers the opcode carries.
func (f *PacketFields) Validate() error {
	op := f.BTH.Opcode
	if !op.Valid() {
		return &header.Error{Header: "bth", Field: "opcode", Value: uint64(op), Hex: 2,
			Reason: "reserved " + op.Service().String() + " opcode", Err: ErrInvalidOpcode}
	}
	if err := f.BTH.Validate(); err != nil {
		return err
	}
	ext := op.ExtHeaders()
	check := func(h ExtHeaders, hdr, field string, v, limit uint64) error {
		if ext&h != 0 && v > limit {
			return &header.Error{Header: hdr, Field: field, Value: v, Rel: ">", Limit: limit, Err: ErrInvalidField}
		}
		return nil
	}
	for _, err := range []error{
		check(ExtRDETH, "rdeth", "EE context", uint64(f.EEContext), QPNMask),
		check(ExtDETH, "deth", "source QP", uint64(f.DETH.SrcQP), QPNMask),
		check(ExtXRCETH, "xrceth", "XRC SRQ", uint64(f.XRCSRQ), QPNMask),
		check(ExtFETH, "feth", "placement type", uint64(f.FETH.PlacementType), MaxFlushPlacementType),
		check(ExtFETH, "feth", "selectivity level", uint64(f.FETH.SelectivityLevel), MaxFlushSelectivityLevel),
		check(ExtAETH, "aeth", "MSN", uint64(f.AETH.MSN), PSNMask),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// EncodeHeaders writes the BTH and the extension headers of f.BTH.Opcode to the
// start of b and returns the number of bytes written, HeaderLen(). Values wider
// than their fields are truncated (use Validate to reject them). For an invalid
// opcode only the BTH is written. It panics if b is shorter than HeaderLen().
func (f *PacketFields) EncodeHeaders(b []byte) int {
	op := f.BTH.Opcode
	n := op.HeaderLen()
	if len(b) < n {
		panic("ibtransport: EncodeHeaders: buffer shorter than the headers of " + op.String())
	}
	BTH(b).Encode(&f.BTH)
	e := &opcodeTable[op]
	ext := e.ext
	if ext == 0 {
		return n
	}
	o := &e.offsets
	if ext&ExtRDETH != 0 {
		RDETH(b[o[0]:]).SetEEContext(f.EEContext)
	}
	if ext&ExtDETH != 0 {
		DETH(b[o[1]:]).Encode(&f.DETH)
	}
	if ext&ExtXRCETH != 0 {
		XRCETH(b[o[2]:]).SetXRCSRQ(f.XRCSRQ)
	}
	if ext&ExtFETH != 0 {
		FETH(b[o[3]:]).Encode(&f.FETH)
	}
	if ext&ExtRETH != 0 {
		RETH(b[o[4]:]).Encode(&f.RETH)
	}
	if ext&ExtAtomicETH != 0 {
		AtomicETH(b[o[5]:]).Encode(&f.AtomicETH)
	}
	if ext&ExtAETH != 0 {
		AETH(b[o[6]:]).Encode(&f.AETH)
	}
	if ext&ExtAtomicAckETH != 0 {
		AtomicAckETH(b[o[7]:]).SetOrigData(f.AtomicAckOrigData)
	}
	if ext&ExtImmDt != 0 {
		ImmDt(b[o[8]:]).SetImmediate(f.Immediate)
	}
	if ext&ExtIETH != 0 {
		IETH(b[o[9]:]).SetRKey(f.InvalidateRKey)
	}
	if ext&extCNPReserved != 0 {
		clear(b[o[10] : int(o[10])+CNPReservedLen])
	}
	return n
}

// AppendHeaders appends the encoded headers of f (see EncodeHeaders) to dst and
// returns the extended slice.
func AppendHeaders(dst []byte, f *PacketFields) []byte {
	n := f.HeaderLen()
	dst = slices.Grow(dst, n)
	start := len(dst)
	dst = dst[:start+n]
	f.EncodeHeaders(dst[start:])
	return dst
}

// PadCountFor returns the BTH pad count for a payload of n bytes: the number of pad
// bytes that bring it to a multiple of 4.
func PadCountFor(n int) uint8 { return uint8(-n & 3) }
