package decode

import (
	hexenc "encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Packet is one RDMA packet as printed: a RoCE packet, or an MPA start frame or FPDU of
// an iWARP stream. Fields that do not apply are nil or empty (and left out of JSON).
type Packet struct {
	Frame     int     `json:"frame"`
	Time      float64 `json:"time"`
	Src       string  `json:"src,omitempty"`
	Dst       string  `json:"dst,omitempty"`
	Transport string  `json:"transport"`
	Opcode    string  `json:"opcode"`

	// RoCE: BTH fields and extension headers.
	DestQP        *uint32        `json:"dest_qp,omitempty"`
	PSN           *uint32        `json:"psn,omitempty"`
	AckReq        *bool          `json:"ack_req,omitempty"`
	SE            bool           `json:"se,omitempty"`
	PadCount      int            `json:"pad_count,omitempty"`
	PayloadLen    *int           `json:"payload_len,omitempty"`
	AETH          *AETHInfo      `json:"aeth,omitempty"`
	RETH          *RETHInfo      `json:"reth,omitempty"`
	AtomicETH     *AtomicETHInfo `json:"atomic_eth,omitempty"`
	AtomicAckOrig *uint64        `json:"atomic_ack_orig,omitempty"`
	ImmDt         *uint32        `json:"immdt,omitempty"`
	IETHRKey      *uint32        `json:"ieth_rkey,omitempty"`
	DETH          *DETHInfo      `json:"deth,omitempty"`
	ICRC          string         `json:"icrc,omitempty"` // "ok", "bad" or "not verified" (Cut)
	// PSNGap is how many request PSNs are missing just before this packet in its
	// direction (lost, or not captured); Duplicate says its PSN was seen before (a
	// retransmission, or a READ response sent again).
	PSNGap    *int     `json:"psn_gap,omitempty"`
	Duplicate bool     `json:"duplicate,omitempty"`
	MAD       *MADInfo `json:"mad,omitempty"`

	// iWARP.
	MPA         *MPAInfo         `json:"mpa,omitempty"`
	DDP         *DDPInfo         `json:"ddp,omitempty"`
	ReadRequest *ReadRequestInfo `json:"read_request,omitempty"`
	// AtomicRequest, AtomicResponse and Immediate are the RFC 7306 message bodies.
	AtomicRequest  *IWARPAtomicRequestInfo  `json:"atomic_request,omitempty"`
	AtomicResponse *IWARPAtomicResponseInfo `json:"atomic_response,omitempty"`
	Immediate      *uint64                  `json:"immediate,omitempty"`
	Terminate      *TerminateInfo           `json:"terminate,omitempty"`
	ULPDULen       *int                     `json:"ulpdu_len,omitempty"`
	CRC            string                   `json:"crc,omitempty"` // "ok", "bad", "none" or "not verified" (Cut)
	Markers        int                      `json:"markers,omitempty"`

	// Cut says the capture's snap length cut the packet after its headers: they are
	// decoded (the lengths are those the headers declare), the payload and the CRC are
	// not verified. OrigLen and CapLen are the lengths on the wire and in the capture of
	// the frame that was cut (for an FPDU, the first frame cut inside it).
	Cut     bool `json:"cut,omitempty"`
	OrigLen int  `json:"orig_len,omitempty"`
	CapLen  int  `json:"cap_len,omitempty"`

	Note  string `json:"note,omitempty"`
	Error string `json:"error,omitempty"`
}

// AETHInfo is an ACK extended transport header.
type AETHInfo struct {
	Syndrome string  `json:"syndrome"` // "ACK", "RNR NAK", "NAK", "reserved"
	Credits  *int    `json:"credits,omitempty"`
	RNRTimer *uint32 `json:"rnr_timer,omitempty"`
	RNRDelay string  `json:"rnr_delay,omitempty"`
	NAKCode  string  `json:"nak_code,omitempty"`
	MSN      uint32  `json:"msn"`
}

// RETHInfo is an RDMA extended transport header.
type RETHInfo struct {
	VA     uint64 `json:"va"`
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"dma_len"`
}

// AtomicETHInfo is an atomic extended transport header.
type AtomicETHInfo struct {
	VA      uint64 `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd uint64 `json:"swap_add"`
	Compare uint64 `json:"compare"`
}

// DETHInfo is a datagram extended transport header.
type DETHInfo struct {
	QKey  uint32 `json:"qkey"`
	SrcQP uint32 `json:"src_qp"`
}

// MADInfo is a management datagram on QP1.
type MADInfo struct {
	Class     string  `json:"class"`
	Method    string  `json:"method"`
	Attribute string  `json:"attribute"`
	TID       uint64  `json:"tid"`
	Status    uint16  `json:"status,omitempty"`
	CM        *CMInfo `json:"cm,omitempty"`
}

// CMInfo is an IB CM message.
type CMInfo struct {
	Message      string      `json:"message"` // "REQ", "REP", ...
	Name         string      `json:"name"`    // "ConnectRequest", ...
	LocalCommID  *uint32     `json:"local_comm_id,omitempty"`
	RemoteCommID *uint32     `json:"remote_comm_id,omitempty"`
	RequestID    *uint32     `json:"request_id,omitempty"`
	LocalQPN     *uint32     `json:"local_qpn,omitempty"`
	RemoteQPN    *uint32     `json:"remote_qpn,omitempty"`
	StartingPSN  *uint32     `json:"starting_psn,omitempty"`
	ServiceID    *uint64     `json:"service_id,omitempty"`
	Reason       string      `json:"reason,omitempty"`
	RDMACM       *RDMACMInfo `json:"rdma_cm,omitempty"`
}

// RDMACMInfo is the rdma_cm header of a REQ's private data: the IP addresses and ports.
type RDMACMInfo struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
}

// MPAInfo is an MPA Request or Reply frame.
type MPAInfo struct {
	Kind       string  `json:"kind"` // "request" or "reply"
	Revision   uint8   `json:"revision"`
	Markers    bool    `json:"markers"`
	CRC        bool    `json:"crc"`
	Reject     bool    `json:"reject"`
	Enhanced   bool    `json:"enhanced"`
	IRD        *uint16 `json:"ird,omitempty"`
	ORD        *uint16 `json:"ord,omitempty"`
	PeerToPeer bool    `json:"peer_to_peer,omitempty"`
	// RTR lists the RFC 6581 ready-to-receive message kinds the frame offers or picks
	// ("zlen", "write", "read"), comma-separated; empty when none is flagged.
	RTR            string `json:"rtr,omitempty"`
	PrivateDataLen int    `json:"private_data_len"`
	// PrivateData is the whole private data in hex, IRD/ORD words included.
	PrivateData string `json:"private_data,omitempty"`
	// ULPData is the private data after the IRD/ORD words (all of it in revision 1):
	// what the ULP (rdma_cm's user, rping, perftest) put there.
	ULPData []byte `json:"-"`
}

// DDPInfo is the DDP and RDMAP header fields of an FPDU.
type DDPInfo struct {
	Tagged         bool    `json:"tagged"`
	Last           bool    `json:"last"`
	STag           *uint32 `json:"stag,omitempty"`
	TO             *uint64 `json:"to,omitempty"`
	QN             *uint32 `json:"qn,omitempty"`
	MSN            *uint32 `json:"msn,omitempty"`
	MO             *uint32 `json:"mo,omitempty"`
	InvalidateSTag *uint32 `json:"invalidate_stag,omitempty"`
}

// ReadRequestInfo is an RDMA Read Request header.
type ReadRequestInfo struct {
	SinkSTag   uint32 `json:"sink_stag"`
	SinkTO     uint64 `json:"sink_to"`
	Size       uint32 `json:"size"`
	SourceSTag uint32 `json:"source_stag"`
	SourceTO   uint64 `json:"source_to"`
}

// IWARPAtomicRequestInfo is an RFC 7306 Atomic Request header.
type IWARPAtomicRequestInfo struct {
	Op          string `json:"op"`
	RequestID   uint32 `json:"request_id"`
	STag        uint32 `json:"stag"`
	TO          uint64 `json:"to"`
	AddSwap     uint64 `json:"add_swap"`
	AddSwapMask uint64 `json:"add_swap_mask"`
	Compare     uint64 `json:"compare"`
	CompareMask uint64 `json:"compare_mask"`
}

// IWARPAtomicResponseInfo is an RFC 7306 Atomic Response header.
type IWARPAtomicResponseInfo struct {
	RequestID uint32 `json:"request_id"`
	Original  uint64 `json:"original"`
}

// TerminateInfo is a Terminate message.
type TerminateInfo struct {
	Layer     string `json:"layer"`
	EType     string `json:"etype"`
	ErrorCode string `json:"error_code"`
}

// Endpoint is one end of a flow.
type Endpoint struct {
	Addr string  `json:"addr"`
	QP   *uint32 `json:"qp,omitempty"`
	Port *uint16 `json:"port,omitempty"`
}

func (e Endpoint) String() string {
	switch {
	case e.QP != nil:
		return fmt.Sprintf("%s QP 0x%06x", e.Addr, *e.QP)
	case e.Port != nil:
		if strings.Contains(e.Addr, ":") {
			return fmt.Sprintf("[%s]:%d", e.Addr, *e.Port)
		}
		return fmt.Sprintf("%s:%d", e.Addr, *e.Port)
	}
	return e.Addr + " QP ?"
}

// MPANegotiation is what a connection's MPA start frames negotiated.
type MPANegotiation struct {
	Revision uint8   `json:"revision"`
	CRC      bool    `json:"crc"`
	Markers  bool    `json:"markers"`
	Rejected bool    `json:"rejected,omitempty"`
	IRD      *uint16 `json:"ird,omitempty"`
	ORD      *uint16 `json:"ord,omitempty"`
}

// FlowSummary summarizes a RoCE QP pair or an iWARP connection (both directions).
type FlowSummary struct {
	// ID numbers the flows of the capture from 1, in the order of their first packets
	// (a filter shows some of them, with the numbers they have without it).
	ID        int             `json:"id"`
	Transport string          `json:"transport"`
	Service   string          `json:"service,omitempty"`
	A         Endpoint        `json:"a"`
	B         Endpoint        `json:"b"`
	MPA       *MPANegotiation `json:"mpa,omitempty"`
	MidStream bool            `json:"mid_stream,omitempty"`

	// Packets counts RoCE packets, or for iWARP the TCP segments that carry data
	// (retransmissions included). Bytes is theirs: for RoCE the frames' lengths on the
	// wire, for iWARP the TCP payload octets (not the frames: ACKs and headers are not
	// counted). PayloadBytes is the data the packets carry after their RoCE transport
	// headers, or after the DDP/RDMAP headers of the FPDUs.
	Packets      int            `json:"packets"`
	Bytes        int            `json:"bytes"`
	PayloadBytes int            `json:"payload_bytes"`
	FPDUs        int            `json:"fpdus,omitempty"`
	Opcodes      map[string]int `json:"opcodes"`
	Messages     map[string]int `json:"messages"`

	// RoCE: request PSN gaps and the PSNs they skip, duplicated requests and READ
	// responses; iWARP: retransmitted TCP segments.
	PSNGaps     int `json:"psn_gaps"`
	PSNsMissing int `json:"psns_missing"`
	Duplicates  int `json:"duplicates"`

	ACKs       int            `json:"acks"`
	NAKs       map[string]int `json:"naks"`
	RNRNAKs    int            `json:"rnr_naks"`
	Terminates int            `json:"terminates"`

	// iWARP: TCP segments that arrived out of order, and bytes the capture lost.
	OutOfOrder int    `json:"out_of_order,omitempty"`
	LostBytes  uint64 `json:"lost_bytes,omitempty"`
	// CRCErrors (iWARP) counts the FPDUs whose CRC32c is wrong, ICRCErrors (RoCE) the
	// packets whose ICRC is wrong and whose headers name this flow. They are among
	// Errors and in no other count: a corrupted packet's fields cannot be believed.
	CRCErrors  int `json:"crc_errors,omitempty"`
	ICRCErrors int `json:"icrc_errors,omitempty"`

	Errors int `json:"errors"`
	// Cut counts the packets (RoCE) or TCP segments (iWARP) among Errors that the snap
	// length cut after their headers.
	Cut   int     `json:"cut,omitempty"`
	First float64 `json:"first"`
	Last  float64 `json:"last"`
	// GoodputBytes is the payload delivered once (no duplicates); GoodputBPS the rate
	// over First..Last in bits per second (0 for a single instant).
	GoodputBytes int     `json:"goodput_bytes"`
	GoodputBPS   float64 `json:"goodput_bps"`
	// RTT is the flow's round-trip times; Throughput its goodput over time.
	RTT        *FlowRTT    `json:"rtt,omitempty"`
	Throughput *Throughput `json:"throughput,omitempty"`

	goodBytes int
	// For numberFlows: the time of the flow's first packet (shown or not), its RoCE
	// directions or its iWARP connection (index in connOrder, plus 1), and whether a
	// packet of it was shown.
	order   float64
	dirKeys []roceDirKey
	conn    int
	shown   bool
	series  *flowSeries
}

// FlowRTT is a flow's round-trip times: RoCE requests to the ACK of their PSN, and
// READ requests (RoCE and iWARP) to the first packet of their response.
type FlowRTT struct {
	RequestACK   *RTTStats `json:"request_ack,omitempty"`
	ReadResponse *RTTStats `json:"read_response,omitempty"`
}

func (f *FlowSummary) finishGoodput() {
	f.GoodputBytes = f.goodBytes
	if d := f.Last - f.First; d > 0 {
		f.GoodputBPS = float64(f.goodBytes) * 8 / d
	}
}

// output writes packets and the summary, as text or JSON lines.
type output struct {
	w    io.Writer
	json bool
	enc  *json.Encoder
	buf  []byte
	err  error
}

func newOutput(w io.Writer, asJSON bool) *output {
	o := &output{w: w, json: asJSON}
	if asJSON {
		o.enc = json.NewEncoder(w)
	}
	return o
}

func (o *output) write(b []byte) {
	if o.err != nil {
		return
	}
	_, o.err = o.w.Write(b)
}

func (o *output) encode(v any) {
	if o.err != nil {
		return
	}
	o.err = o.enc.Encode(v)
}

// fileError prints damage to the file itself.
func (o *output) fileError(p Problem) {
	if o.json {
		o.encode(struct {
			Frame     int    `json:"frame"`
			Transport string `json:"transport"`
			Opcode    string `json:"opcode"`
			Error     string `json:"error"`
		}{0, "", "", p.Reason})
		return
	}
	o.write([]byte("file: ERROR: " + p.Reason + "\n"))
}

// hex appends name, then v in hex with "0x", zero-padded to digits digits:
// a header field of a packet's line, without fmt (the line is written for
// every packet).
func hex(b []byte, name string, v uint64, digits int) []byte {
	b = append(b, name...)
	b = append(b, "0x"...)
	s := strconv.FormatUint(v, 16)
	for i := len(s); i < digits; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// packet prints one packet.
func (o *output) packet(p *Packet) {
	if o.json {
		o.encode(p)
		return
	}
	b := o.buf[:0]
	b = append(b, fmt.Sprintf("%6d %11.6f ", p.Frame, p.Time)...)
	b = appendPacket(b, p)
	if p.PSNGap != nil {
		b = append(b, " [PSN gap: "...)
		b = strconv.AppendInt(b, int64(*p.PSNGap), 10)
		b = append(b, " missing before]"...)
	}
	if p.Duplicate {
		b = append(b, " [duplicate]"...)
	}
	if p.Note != "" {
		b = append(b, " [note: "+p.Note+"]"...)
	}
	if p.Error != "" {
		b = append(b, " [ERROR: "+p.Error+"]"...)
	}
	b = append(b, '\n')
	o.buf = b
	o.write(b)
}

// appendPacket appends what a packet's line says after its frame number and time:
// addresses, transport, opcode and header fields, up to its CRC (not its verdicts).
func appendPacket(b []byte, p *Packet) []byte {
	if p.Src != "" || p.Dst != "" {
		b = append(b, p.Src...)
		b = append(b, " → "...)
		b = append(b, p.Dst...)
		b = append(b, ' ')
	}
	b = append(b, p.Transport...)
	b = append(b, ' ')
	b = append(b, p.Opcode...)
	if m := p.MAD; m != nil {
		if m.CM != nil {
			b = append(b, " CM "+m.CM.Message...)
		} else {
			b = append(b, " MAD "+m.Class+" "+m.Method...)
		}
	}
	if p.DestQP != nil {
		b = hex(b, " QP=", uint64(*p.DestQP), 6)
	}
	if p.PSN != nil {
		b = append(b, " PSN="...)
		b = strconv.AppendUint(b, uint64(*p.PSN), 10)
	}
	if p.AckReq != nil && *p.AckReq {
		b = append(b, " AckReq"...)
	}
	if p.SE {
		b = append(b, " SE"...)
	}
	if p.PayloadLen != nil {
		b = append(b, " len="...)
		b = strconv.AppendInt(b, int64(*p.PayloadLen), 10)
	}
	if a := p.AETH; a != nil {
		b = append(b, " AETH "...)
		b = append(b, a.Syndrome...)
		switch {
		case a.Credits != nil:
			b = append(b, " credits="...)
			b = strconv.AppendInt(b, int64(*a.Credits), 10)
		case a.RNRTimer != nil:
			b = append(b, " timer="...)
			b = strconv.AppendUint(b, uint64(*a.RNRTimer), 10)
			b = append(b, " ("+a.RNRDelay+")"...)
		case a.NAKCode != "":
			b = append(b, " "+a.NAKCode...)
		}
		b = append(b, " MSN="...)
		b = strconv.AppendUint(b, uint64(a.MSN), 10)
	}
	if r := p.RETH; r != nil {
		b = hex(b, " RETH VA=", r.VA, 0)
		b = hex(b, " RKey=", uint64(r.RKey), 8)
		b = append(b, " DMALen="...)
		b = strconv.AppendUint(b, uint64(r.DMALen), 10)
	}
	if a := p.AtomicETH; a != nil {
		b = hex(b, " AtomicETH VA=", a.VA, 0)
		b = hex(b, " RKey=", uint64(a.RKey), 8)
		b = hex(b, " SwapAdd=", a.SwapAdd, 0)
		b = hex(b, " Compare=", a.Compare, 0)
	}
	if p.AtomicAckOrig != nil {
		b = hex(b, " AtomicAckETH Orig=", *p.AtomicAckOrig, 0)
	}
	if p.ImmDt != nil {
		b = hex(b, " ImmDt=", uint64(*p.ImmDt), 8)
	}
	if p.IETHRKey != nil {
		b = hex(b, " IETH RKey=", uint64(*p.IETHRKey), 8)
	}
	if d := p.DETH; d != nil {
		b = hex(b, " DETH QKey=", uint64(d.QKey), 8)
		b = hex(b, " SrcQP=", uint64(d.SrcQP), 6)
	}
	if m := p.MAD; m != nil {
		b = append(b, fmt.Sprintf(" TID=0x%x", m.TID)...)
		if c := m.CM; c != nil {
			b = appendCM(b, c)
		}
	}
	if m := p.MPA; m != nil {
		b = append(b, fmt.Sprintf(" rev=%d flags=%s", m.Revision, mpaFlags(m))...)
		if m.IRD != nil {
			b = append(b, fmt.Sprintf(" IRD=%d ORD=%d", *m.IRD, *m.ORD)...)
			if m.PeerToPeer {
				b = append(b, " P2P"...)
			}
			if m.RTR != "" {
				b = append(b, " RTR="+m.RTR...)
			}
		}
		b = append(b, fmt.Sprintf(" private_data=%d", m.PrivateDataLen)...)
		if len(m.ULPData) > 0 {
			b = appendULPData(b, m.ULPData)
		}
	}
	if d := p.DDP; d != nil {
		if d.Tagged {
			b = hex(b, " tagged STag=", uint64(*d.STag), 8)
			b = hex(b, " TO=", *d.TO, 0)
		} else {
			b = append(b, fmt.Sprintf(" untagged QN=%d MSN=%d MO=%d", *d.QN, *d.MSN, *d.MO)...)
		}
		if d.InvalidateSTag != nil {
			b = hex(b, " InvalidateSTag=", uint64(*d.InvalidateSTag), 8)
		}
		if d.Last {
			b = append(b, " L=1"...)
		} else {
			b = append(b, " L=0"...)
		}
	}
	if r := p.ReadRequest; r != nil {
		b = append(b, fmt.Sprintf(" sink STag=0x%08x TO=0x%x size=%d source STag=0x%08x TO=0x%x",
			r.SinkSTag, r.SinkTO, r.Size, r.SourceSTag, r.SourceTO)...)
	}
	if a := p.AtomicRequest; a != nil {
		b = append(b, fmt.Sprintf(" %s ReqID=%d STag=0x%08x TO=0x%x AddSwap=0x%x/0x%x Compare=0x%x/0x%x",
			a.Op, a.RequestID, a.STag, a.TO, a.AddSwap, a.AddSwapMask, a.Compare, a.CompareMask)...)
	}
	if a := p.AtomicResponse; a != nil {
		b = append(b, fmt.Sprintf(" ReqID=%d Orig=0x%x", a.RequestID, a.Original)...)
	}
	if p.Immediate != nil {
		b = append(b, fmt.Sprintf(" Imm=0x%016x", *p.Immediate)...)
	}
	if t := p.Terminate; t != nil {
		b = append(b, " "+t.Layer+" "+t.EType+": "+t.ErrorCode...)
	}
	if p.ULPDULen != nil {
		b = append(b, " ulpdu="...)
		b = strconv.AppendInt(b, int64(*p.ULPDULen), 10)
	}
	if p.Markers > 0 {
		b = append(b, " markers="...)
		b = strconv.AppendInt(b, int64(p.Markers), 10)
	}
	if p.CRC != "" && p.CRC != "none" {
		b = append(b, " CRC "+p.CRC...)
	}
	return b
}

func appendCM(b []byte, c *CMInfo) []byte {
	b = appendSet(b, " LocalCommID=0x%08x", c.LocalCommID)
	b = appendSet(b, " RemoteCommID=0x%08x", c.RemoteCommID)
	b = appendSet(b, " RequestID=0x%08x", c.RequestID)
	b = appendSet(b, " QPN=0x%06x", c.LocalQPN)
	b = appendSet(b, " RemoteQPN=0x%06x", c.RemoteQPN)
	b = appendSet(b, " StartingPSN=%d", c.StartingPSN)
	b = appendSet(b, " ServiceID=0x%016x", c.ServiceID)
	if c.Reason != "" {
		b = append(b, " reason: "+c.Reason...)
	}
	if r := c.RDMACM; r != nil {
		b = append(b, " rdma_cm "+r.Src+" → "+r.Dst...)
	}
	return b
}

// appendSet appends *v formatted by format, if v is set (not nil).
func appendSet[T any](b []byte, format string, v *T) []byte {
	if v == nil {
		return b
	}
	return fmt.Appendf(b, format, *v)
}

// appendULPData appends ":" and the ULP's private data in hex, at most
// maxULPDataShown octets of it, then "…" if there is more.
func appendULPData(b, pd []byte) []byte {
	const maxULPDataShown = 32
	b = append(b, ':')
	b = hexenc.AppendEncode(b, pd[:min(len(pd), maxULPDataShown)])
	if len(pd) > maxULPDataShown {
		b = append(b, "…"...)
	}
	return b
}

func mpaFlags(m *MPAInfo) string {
	s := []byte("----")
	if m.Markers {
		s[0] = 'M'
	}
	if m.CRC {
		s[1] = 'C'
	}
	if m.Reject {
		s[2] = 'R'
	}
	if m.Enhanced {
		s[3] = 'H'
	}
	return string(s)
}

// sortedCounts prints a count map as "a 3, b 1", largest first.
func sortedCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}

// jsonSummary is the last JSON line.
type jsonSummary struct {
	Summary struct {
		Format     string        `json:"format"`
		Frames     int           `json:"frames"`
		RDMAFrames int           `json:"rdma_frames"`
		Packets    int           `json:"packets"`
		Errors     int           `json:"errors"`
		Cut        int           `json:"cut"`
		CRCErrors  int           `json:"crc_errors"`
		Filter     string        `json:"filter,omitempty"`
		ErrorList  []Problem     `json:"error_list,omitempty"`
		Notes      []Problem     `json:"notes,omitempty"`
		Flows      []FlowSummary `json:"flows,omitempty"`
	} `json:"summary"`
}

// MarshalJSON writes a problem as {"frame": N, "reason": "..."}, with "cut": true for a
// frame cut by the snap length after its headers.
func (p Problem) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Frame  int    `json:"frame"`
		Reason string `json:"reason"`
		Cut    bool   `json:"cut,omitempty"`
	}{p.Frame, p.Reason, p.Cut})
}

// summary prints the totals and, with flows, the per-flow summary.
func (o *output) summary(r *Result, flows bool) {
	if o.json {
		var s jsonSummary
		s.Summary.Format = r.Format
		s.Summary.Frames = r.Frames
		s.Summary.RDMAFrames = r.RDMAFrames
		s.Summary.Packets = r.Packets
		s.Summary.Errors = len(r.Errors)
		s.Summary.Cut = r.Cut
		s.Summary.CRCErrors = r.CRCErrors
		s.Summary.Filter = r.Filter
		s.Summary.ErrorList = r.Errors
		s.Summary.Notes = r.Notes
		if flows {
			s.Summary.Flows = r.Flows
			if s.Summary.Flows == nil {
				s.Summary.Flows = []FlowSummary{}
			}
		}
		o.encode(&s)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d frames (%s), %d RDMA frames, %d RDMA packets, %d errors",
		r.Frames, r.Format, r.RDMAFrames, r.Packets, len(r.Errors))
	if r.Cut > 0 {
		fmt.Fprintf(&b, " (%d frames cut by the snap length, headers decoded; ", r.Cut)
		if other := len(r.Errors) - r.Cut; other > 0 {
			fmt.Fprintf(&b, "%d other errors)", other)
		} else {
			b.WriteString("none bad otherwise)")
		}
	}
	if r.CRCErrors > 0 {
		fmt.Fprintf(&b, ", %d with a wrong ICRC or CRC (kept out of the flows' counts)", r.CRCErrors)
	}
	b.WriteByte('\n')
	if r.Filter != "" {
		fmt.Fprintf(&b, "filter %s: the totals, problems and flows are those of the packets shown\n", r.Filter)
	}
	for _, p := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", p.Error())
	}
	// The frames cut after their headers are one line: each packet line says it.
	var cut frameSet
	for _, p := range r.Errors {
		if p.Cut {
			cut.add(p.Frame)
			continue
		}
		fmt.Fprintf(&b, "ERROR: %s\n", p.Error())
	}
	if cut.n > 0 {
		fmt.Fprintf(&b, "ERROR: %s cut short by the capture's snap length after their headers: headers decoded, payload and CRC not verified\n", cut.String())
	}
	if flows && len(r.Flows) > 0 {
		b.WriteString("\nFlows:\n")
		for i := range r.Flows {
			writeFlow(&b, &r.Flows[i])
		}
	}
	o.write([]byte(b.String()))
}

func writeFlow(b *strings.Builder, f *FlowSummary) {
	kind := f.Transport
	if f.Service != "" {
		kind += " " + f.Service
	}
	fmt.Fprintf(b, "  #%d %s %s ↔ %s: %d packets, %d bytes, %.6f-%.6f s, goodput %d bytes",
		f.ID, kind, f.A, f.B, f.Packets, f.Bytes, f.First, f.Last, f.GoodputBytes)
	if f.GoodputBPS > 0 {
		fmt.Fprintf(b, " (%s)", rate(f.GoodputBPS))
	}
	b.WriteByte('\n')
	if m := f.MPA; m != nil {
		fmt.Fprintf(b, "      MPA revision %d, CRC %s, markers %s", m.Revision, onOff(m.CRC), onOff(m.Markers))
		if m.IRD != nil {
			fmt.Fprintf(b, ", IRD %d ORD %d", *m.IRD, *m.ORD)
		}
		if m.Rejected {
			b.WriteString(", REJECTED")
		}
		b.WriteByte('\n')
	}
	if f.MidStream {
		b.WriteString("      capture starts mid-stream (no MPA negotiation seen)\n")
	}
	if f.FPDUs > 0 {
		fmt.Fprintf(b, "      FPDUs %d\n", f.FPDUs)
	}
	fmt.Fprintf(b, "      opcodes: %s\n", sortedCounts(f.Opcodes))
	fmt.Fprintf(b, "      messages: %s\n", sortedCounts(f.Messages))
	if f.Transport == "iWARP" {
		fmt.Fprintf(b, "      TCP retransmissions %d, out of order %d, lost bytes %d, Terminates %d, CRC errors %d, errors %d%s\n",
			f.Duplicates, f.OutOfOrder, f.LostBytes, f.Terminates, f.CRCErrors, f.Errors, cutCount(f.Cut))
		writeTimes(b, f)
		return
	}
	icrc := ""
	if f.ICRCErrors > 0 {
		icrc = fmt.Sprintf(", ICRC errors %d", f.ICRCErrors)
	}
	fmt.Fprintf(b, "      PSN gaps %d (%d PSNs missing), duplicates %d, ACKs %d, NAKs: %s, RNR NAKs %d%s, errors %d%s\n",
		f.PSNGaps, f.PSNsMissing, f.Duplicates, f.ACKs, sortedCounts(f.NAKs), f.RNRNAKs, icrc, f.Errors, cutCount(f.Cut))
	writeTimes(b, f)
}

// cutCount says how many of a flow's errors are frames cut after their headers, or "".
func cutCount(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d cut by the snap length after their headers)", n)
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

func rate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.2f Mbit/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.2f kbit/s", bps/1e3)
	}
	return fmt.Sprintf("%.0f bit/s", bps)
}
