package roce

import (
	"encoding/binary"
	"errors"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
)

// gopacket layers for RoCE. They are thin adapters: decoding is done by GRH.Check and
// ibtransport.Packet.Decode, and each layer keeps the views those return (sub-slices of
// the packet data, no copies), so a DecodingLayerParser over them allocates nothing.
//
// With gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default) a RoCEv2
// frame decodes as
//
//	Ethernet, IPv4|IPv6, UDP, IBTransport, Payload, ICRC
//
// and a RoCEv1 frame (Ethertype 0x8915) as
//
//	Ethernet, GRH, IBTransport, Payload, ICRC
//
// The ICRC (with the pad bytes before it) is a trailer: it follows the payload in the
// frame, so it is the last layer. A DecodingLayerParser follows NextLayerType from the
// IBTransport layer to the payload only; the trailer is IBTransport.Trailer, and an
// ICRC layer decodes from it (DecodeFromBytes(ib.Trailer, df)).
//
// SerializeLayers of the decoded layers gives back the frame: the ICRC layer appends pad
// and ICRC when it is serialized (first, being last), the payload and the IB headers are
// then prepended in front of them. The ICRC value covers the IP and UDP headers, which
// are serialized after it, so a new frame gets its ICRC in a post-pass: SetFrameICRC.

// Layer type numbers, in gopacket's range for application layers (1000-1999).
const (
	layerNumGRH         = 1790
	layerNumIBTransport = 1791
	layerNumICRC        = 1792
)

// Layer types of the RoCE layers, registered by init.
var (
	// LayerTypeGRH is the RoCEv1 Global Route Header (Ethertype 0x8915).
	LayerTypeGRH gopacket.LayerType
	// LayerTypeIBTransport is the IB transport headers: BTH and extension headers
	// (UDP port 4791, or after a GRH).
	LayerTypeIBTransport gopacket.LayerType
	// LayerTypeICRC is the trailer of a RoCE packet: pad bytes and the ICRC.
	LayerTypeICRC gopacket.LayerType
)

func init() {
	LayerTypeGRH = gopacket.RegisterLayerType(layerNumGRH, gopacket.LayerTypeMetadata{
		Name: "GRH", Decoder: gopacket.DecodeFunc(decodeGRHLayer)})
	LayerTypeIBTransport = gopacket.RegisterLayerType(layerNumIBTransport, gopacket.LayerTypeMetadata{
		Name: "IBTransport", Decoder: gopacket.DecodeFunc(decodeIBTransportLayer)})
	LayerTypeICRC = gopacket.RegisterLayerType(layerNumICRC, gopacket.LayerTypeMetadata{
		Name: "ICRC", Decoder: gopacket.DecodeFunc(decodeICRCLayer)})
	layers.EthernetTypeMetadata[EtherTypeRoCEv1] = layers.EnumMetadata{
		DecodeWith: gopacket.DecodeFunc(decodeGRHLayer), Name: "RoCEv1", LayerType: LayerTypeGRH}
	layers.RegisterUDPPortLayerType(UDPPort, LayerTypeIBTransport)
}

// markTruncated tells df that data ended early when err says so (ErrTruncated is the
// shared header.ErrTruncated, so this also catches ibtransport's truncated headers).
func markTruncated(df gopacket.DecodeFeedback, err error) {
	if errors.Is(err, ErrTruncated) {
		df.SetTruncated()
	}
}

// GRHLayer is the RoCEv1 GRH as a gopacket layer (IBTA Vol. 1 §8.3; see GRH for the bit
// diagram). Contents is the 40-byte header, Payload the PayLen bytes after it: the IB
// transport packet through the ICRC.
type GRHLayer struct {
	layers.BaseLayer
	// GRH is a view of the header (Contents); nil before a successful decode.
	GRH GRH
}

// LayerType returns LayerTypeGRH.
func (g *GRHLayer) LayerType() gopacket.LayerType { return LayerTypeGRH }

// CanDecode returns LayerTypeGRH.
func (g *GRHLayer) CanDecode() gopacket.LayerClass { return LayerTypeGRH }

// NextLayerType returns LayerTypeIBTransport: GRH.Check accepts only NxtHdr 0x1B (BTH).
func (g *GRHLayer) NextLayerType() gopacket.LayerType {
	if g.GRH == nil {
		return gopacket.LayerTypeZero
	}
	return LayerTypeIBTransport
}

// DecodeFromBytes decodes a GRH at the start of data, resetting g first. Payload is cut
// to PayLen; if data holds less, the frame was truncated: Payload is what there is and
// df.SetTruncated is called.
func (g *GRHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*g = GRHLayer{}
	h := GRH(data)
	if err := h.Check(); err != nil {
		markTruncated(df, err)
		return err
	}
	rest := data[GRHLen:]
	n := int(h.PayLen())
	if n > len(rest) {
		df.SetTruncated()
		n = len(rest)
	}
	g.GRH = h[:GRHLen:GRHLen]
	g.Contents = data[:GRHLen:GRHLen]
	g.Payload = rest[:n]
	return nil
}

// SerializeTo prepends the GRH bytes (g.GRH: a decoded header, or 40 bytes written with
// GRH.Encode). With opts.FixLengths, PayLen is set to the bytes already in b.
func (g *GRHLayer) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if len(g.GRH) < GRHLen {
		return header.Truncated("grh", "length", len(g.GRH), GRHLen)
	}
	n := len(b.Bytes())
	hdr, err := b.PrependBytes(GRHLen)
	if err != nil {
		return err
	}
	copy(hdr, g.GRH[:GRHLen])
	if opts.FixLengths {
		GRH(hdr).SetPayLen(uint16(n))
	}
	return nil
}

func decodeGRHLayer(data []byte, p gopacket.PacketBuilder) error {
	g := &GRHLayer{}
	if err := g.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(g)
	p.SetNetworkLayer(g)
	return p.NextDecoder(g.NextLayerType())
}

// NetworkFlow returns the flow from SGID to DGID, as IPv6 addresses.
func (g *GRHLayer) NetworkFlow() gopacket.Flow {
	return gopacket.NewFlow(layers.EndpointIPv6, g.GRH[grhSGID:grhSGID+16], g.GRH[grhDGID:grhDGID+16])
}

// IBTransport is the IB transport headers of a RoCE packet as a gopacket layer (IBTA
// Vol. 1 §9.2-9.3): the BTH and the extension headers its opcode calls for. Contents is
// those headers, Payload the payload without its pad; Trailer holds the pad and the ICRC
// (the ICRC layer).
type IBTransport struct {
	layers.BaseLayer
	// Packet holds the views of the BTH and extension headers (see ibtransport.Packet).
	Packet ibtransport.Packet
	// Raw is the IB packet from the BTH through the pad: what the ICRC covers after the
	// masked network headers.
	Raw []byte
	// Trailer is the pad bytes followed by the 4-byte ICRC.
	Trailer []byte
}

// LayerType returns LayerTypeIBTransport.
func (ib *IBTransport) LayerType() gopacket.LayerType { return LayerTypeIBTransport }

// CanDecode returns LayerTypeIBTransport.
func (ib *IBTransport) CanDecode() gopacket.LayerClass { return LayerTypeIBTransport }

// NextLayerType returns gopacket.LayerTypePayload if the packet has payload bytes.
func (ib *IBTransport) NextLayerType() gopacket.LayerType {
	if len(ib.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes an IB packet, data running from the BTH through the ICRC (a
// RoCEv2 UDP payload or a RoCEv1 GRH payload), with ibtransport.Packet.Decode. It
// resets ib first. The ICRC is not verified (it covers the IP and UDP headers, which
// this layer does not see): see VerifyPacketICRC.
func (ib *IBTransport) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*ib = IBTransport{}
	if len(data) < ibtransport.BTHLen+ICRCLen {
		df.SetTruncated()
		return header.Truncated("ib", "packet length", len(data), ibtransport.BTHLen+ICRCLen)
	}
	n := len(data) - ICRCLen
	if err := ib.Packet.Decode(data[:n]); err != nil {
		markTruncated(df, err)
		return err
	}
	hl := ib.Packet.HeaderLen()
	pl := hl + len(ib.Packet.Payload)
	ib.Contents = data[:hl:hl]
	ib.Payload = ib.Packet.Payload
	ib.Raw = data[:n:n]
	ib.Trailer = data[pl:]
	return nil
}

// SerializeTo prepends the header bytes (ib.Contents: the BTH and extension headers as
// decoded, or as written with ibtransport.PacketFields.EncodeHeaders). The pad and ICRC
// are the ICRC layer's, the payload the payload layer's.
func (ib *IBTransport) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if len(ib.Contents) < ibtransport.BTHLen {
		return header.Truncated("ib", "header length", len(ib.Contents), ibtransport.BTHLen)
	}
	hdr, err := b.PrependBytes(len(ib.Contents))
	if err != nil {
		return err
	}
	copy(hdr, ib.Contents)
	return nil
}

func decodeIBTransportLayer(data []byte, p gopacket.PacketBuilder) error {
	ib := &IBTransport{}
	if err := ib.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(ib)
	if len(ib.Payload) > 0 {
		pl := &gopacket.Payload{}
		_ = pl.DecodeFromBytes(ib.Payload, p)
		p.AddLayer(pl)
		p.SetApplicationLayer(pl)
	}
	icrc := &ICRC{}
	if err := icrc.DecodeFromBytes(ib.Trailer, p); err != nil {
		return err
	}
	p.AddLayer(icrc)
	return nil
}

// ICRC is the trailer of a RoCE packet as a gopacket layer: the 0-3 pad bytes of the
// payload, then the 4-byte invariant CRC (IBTA Vol. 1 §7.8.1), which rxe stores
// little-endian (see Frame.ICRC). Contents is pad and ICRC.
type ICRC struct {
	layers.BaseLayer
	// Pad is the pad bytes (BTH pad count of them).
	Pad []byte
	// CRC is the ICRC value, read little-endian as Frame.ICRC.
	CRC uint32
}

// NewICRCTrailer returns an ICRC layer for a payload of payloadLen bytes: zero pad bytes
// to a multiple of 4 and a zero ICRC, to be filled by SetFrameICRC after serializing.
func NewICRCTrailer(payloadLen int) *ICRC {
	var pad [3]byte
	return &ICRC{Pad: pad[:ibtransport.PadCountFor(payloadLen)]}
}

// LayerType returns LayerTypeICRC.
func (c *ICRC) LayerType() gopacket.LayerType { return LayerTypeICRC }

// CanDecode returns LayerTypeICRC.
func (c *ICRC) CanDecode() gopacket.LayerClass { return LayerTypeICRC }

// NextLayerType returns gopacket.LayerTypeZero: nothing follows the ICRC.
func (c *ICRC) NextLayerType() gopacket.LayerType { return gopacket.LayerTypeZero }

// DecodeFromBytes decodes a trailer: data is the pad bytes and the ICRC, 4 to 7 bytes.
func (c *ICRC) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*c = ICRC{}
	if len(data) < ICRCLen {
		df.SetTruncated()
		return header.Truncated("icrc", "length", len(data), ICRCLen)
	}
	if len(data) > ICRCLen+3 {
		return header.Invalid("icrc", "trailer length", uint64(len(data)), ">", ICRCLen+3)
	}
	n := len(data) - ICRCLen
	c.Contents = data
	c.Pad = data[:n:n]
	c.CRC = binary.LittleEndian.Uint32(data[n:])
	return nil
}

// SerializeTo appends the pad bytes and the ICRC (little-endian) to b: as the last layer
// it is serialized first, so they end up after the payload.
func (c *ICRC) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	t, err := b.AppendBytes(len(c.Pad) + ICRCLen)
	if err != nil {
		return err
	}
	copy(t, c.Pad)
	PutICRC(t[len(c.Pad):], c.CRC)
	return nil
}

func decodeICRCLayer(data []byte, p gopacket.PacketBuilder) error {
	c := &ICRC{}
	if err := c.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(c)
	return nil
}

// SetFrameICRC is the post-pass after serializing a RoCE Ethernet frame: it decodes
// frame (Frame.DecodeEthernet) and writes the right ICRC into its last four bytes.
func SetFrameICRC(frame []byte) error {
	var f Frame
	if err := f.DecodeEthernet(frame); err != nil {
		return err
	}
	SetICRC(&f)
	return nil
}

// VerifyPacketICRC checks the ICRC of a RoCE packet decoded by gopacket: it recomputes
// it from the IPv4/IPv6 and UDP layers (or the GRH layer) and the IBTransport layer, and
// compares it with the ICRC layer. It returns nil if they match, an error matching
// ErrBadICRC if not, and one matching ErrTruncated if a layer is missing.
func VerifyPacketICRC(p gopacket.Packet) error {
	ibl, _ := p.Layer(LayerTypeIBTransport).(*IBTransport)
	if ibl == nil || len(ibl.Trailer) < ICRCLen {
		return header.Truncated("icrc", "ib transport layer", 0, 1)
	}
	carried := binary.LittleEndian.Uint32(ibl.Trailer[len(ibl.Trailer)-ICRCLen:])
	var want uint32
	if g, ok := p.Layer(LayerTypeGRH).(*GRHLayer); ok {
		want = ComputeICRCv1(g.Contents, ibl.Raw)
	} else {
		udp := p.Layer(layers.LayerTypeUDP)
		ip := p.Layer(layers.LayerTypeIPv4)
		if ip == nil {
			ip = p.Layer(layers.LayerTypeIPv6)
		}
		if udp == nil || ip == nil {
			return header.Truncated("icrc", "ip and udp layers", 0, 1)
		}
		want = ComputeICRC(ip.LayerContents(), udp.LayerContents(), ibl.Raw)
	}
	if want != carried {
		return &header.Error{Err: ErrBadICRC, Header: "icrc", Field: "value", Value: uint64(carried), Limit: uint64(want), Rel: "!=", LimitName: "computed", Hex: 1}
	}
	return nil
}

// Compile-time checks that the layers implement the gopacket interfaces.
var (
	_ gopacket.DecodingLayer     = (*GRHLayer)(nil)
	_ gopacket.SerializableLayer = (*GRHLayer)(nil)
	_ gopacket.NetworkLayer      = (*GRHLayer)(nil)
	_ gopacket.DecodingLayer     = (*IBTransport)(nil)
	_ gopacket.SerializableLayer = (*IBTransport)(nil)
	_ gopacket.DecodingLayer     = (*ICRC)(nil)
	_ gopacket.SerializableLayer = (*ICRC)(nil)
)
