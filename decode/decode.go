package decode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/gopacket"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// Options select what Run prints.
type Options struct {
	// JSON prints one JSON object per line (one per RDMA packet, then the summary)
	// instead of text.
	JSON bool
	// Flows includes the per-flow summary.
	Flows bool
	// Summary prints the summary at the end (totals, and the flows if Flows is set).
	Summary bool
	// Verdicts keeps each RDMA packet's verdict in Result.Verdicts (what Annotate
	// writes as pcapng comments), whatever the filter.
	Verdicts bool
	// Filter, if not nil, restricts the packets printed and summarized. One that
	// selects by flow or QP makes Run read the capture twice (the first time to find
	// the flows): from its start again if r is an io.Seeker, else from memory.
	Filter *Filter
	// Report keeps what WriteHTML draws of each flow (its packets' PSNs and times).
	Report bool
}

// Problem is something wrong with one frame, or with the file (Frame 0).
type Problem struct {
	// Frame is the 1-based frame number, 0 for the file as a whole.
	Frame int
	// Reason says what is wrong, naming the field and value.
	Reason string
	// Cut says the frame is an error only because the capture's snap length cut it
	// after its headers: the headers were decoded, the payload and the CRC could not
	// be verified, and nothing else is wrong with it.
	Cut bool
}

// Error returns "frame N: reason" (or "file: reason").
func (p Problem) Error() string {
	if p.Frame == 0 {
		return "file: " + p.Reason
	}
	return fmt.Sprintf("frame %d: %s", p.Frame, p.Reason)
}

// Result is what Run found.
type Result struct {
	// Format is "pcap" or "pcapng".
	Format string
	// Frames is the number of frames read.
	Frames int
	// RDMAFrames is the number of frames that carry RoCE packets or in which an MPA frame
	// (start frame or FPDU) of a reassembled TCP stream ends, and the frames of RoCE
	// flows and iWARP connections that are reported cut short; RDMAFrameNumbers lists
	// them.
	RDMAFrames       int
	RDMAFrameNumbers []int
	// Packets is the number of RDMA packets printed: RoCE packets and MPA frames.
	Packets int
	// Errors are the bad frames (malformed headers, wrong CRCs, frames cut short by the
	// capture) and file damage.
	Errors []Problem
	// Cut is the number of Errors that are frames cut by the snap length after their
	// headers and otherwise good (Problem.Cut).
	Cut int
	// CRCErrors is the number of RoCE packets whose ICRC, and iWARP FPDUs whose CRC32c,
	// is wrong: they are among Errors, and in no flow's statistics (packets, PSNs,
	// opcodes, messages), only in its ICRCErrors or CRCErrors.
	CRCErrors int
	// Notes are observations that are not errors: a capture starting mid-stream, bytes
	// the capture lost, a connection cut off by the end of the capture.
	Notes []Problem
	// Flows summarizes each RoCE QP pair and each iWARP connection.
	Flows []FlowSummary
	// Verdicts is each RDMA packet's verdict, in the order the packets were printed
	// (Options.Verdicts).
	Verdicts []Verdict
	// Filter describes Options.Filter ("" for none): then Packets, RDMAFrames, Errors,
	// Notes and CRCErrors are those of the packets shown, and Flows the flows shown.
	Filter string

	// series is what WriteHTML draws of each flow, by flow ID (Options.Report).
	series map[int]*flowSeries
}

// ExitCode returns the exit status for the result: 0 if every RDMA frame was well
// formed and every CRC verified, 1 otherwise.
func (r *Result) ExitCode() int {
	if len(r.Errors) > 0 {
		return 1
	}
	return 0
}

// Run reads a pcap or pcapng capture from r and writes its explanation to w. The error
// is non-nil only if r is not a capture (it wraps ErrNotCapture), r cannot be read at all
// (a directory), or w fails; problems
// with frames, and a file cut short, are in Result.Errors.
func Run(r io.Reader, w io.Writer, opts Options) (Result, error) {
	var first *decoder
	if f := opts.Filter; f != nil {
		if err := f.Check(); err != nil {
			return Result{}, err
		}
		if f.needsFlows() {
			// The first pass finds the flows, and so the flow of each packet.
			rs, start, err := rewindable(r)
			if err != nil {
				return Result{}, fmt.Errorf("read: %w", err)
			}
			src, err := openCapture(rs)
			if err != nil {
				return Result{}, err
			}
			first = newDecoder(io.Discard, Options{})
			first.run(src)
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return Result{}, fmt.Errorf("read again: %w", err)
			}
			r = rs
		}
	}
	src, err := openCapture(r)
	if err != nil {
		return Result{}, err
	}
	d := newDecoder(w, opts)
	if first != nil {
		d.dirFlow, d.connFlow = first.dirFlow, first.connFlow
		d.selectedFlows = map[int]bool{}
		for i := range first.res.Flows {
			if fs := &first.res.Flows[i]; opts.Filter.flowSelected(fs) {
				d.selectedFlows[fs.ID] = true
			}
		}
	}
	d.run(src)
	return d.res, d.out.err
}

// rewindable returns r as an io.ReadSeeker and the offset it is at: r itself if it is
// one, else what is left of it, read into memory.
func rewindable(r io.Reader) (io.ReadSeeker, int64, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		if off, err := rs.Seek(0, io.SeekCurrent); err == nil {
			return rs, off, nil
		}
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, 0, err
	}
	return bytes.NewReader(b), 0, nil
}

// run decodes every frame of src and finishes.
func (d *decoder) run(src frameSource) {
	d.res.Format = src.format()
	for {
		data, ci, link, err := src.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				d.fileProblem(err)
			}
			break
		}
		d.frame++
		d.handleFrame(data, ci, link)
		if d.out.err != nil {
			break
		}
	}
	d.finish()
}

// decoder holds the state of one Run.
type decoder struct {
	opts  Options
	out   *output
	res   Result
	frame int

	t0       time.Time
	haveT0   bool
	now      time.Time
	wire     int // the current frame's length on the wire
	captured int // and in the capture

	rf roce.Frame
	ib ibtransport.Packet
	// whole is the frame being decoded at its length on the wire, the octets the
	// capture cut off read as zeros (see decodeCut); cutHeaders says d.rf is a view of
	// it whose headers the capture holds, cutWhole how many octets of the frame hold
	// its headers and IB payload (less means the payload is cut).
	whole      []byte
	cutHeaders bool
	cutWhole   int

	// hdr is the frame's Ethernet, IP, TCP and UDP headers (parse) for everything
	// that is not RoCE: TCP for iWARP, and telling UDP port 4791 apart when
	// roce.Frame rejects a frame.
	hdr netHeaders

	rdma     map[int]bool // frames counted as RDMA
	roceDirs map[roceDirKey]*roceDir
	// roceICRCErrors counts the packets with a wrong ICRC by the direction their
	// headers name: they are in no direction's statistics.
	roceICRCErrors map[roceDirKey]int
	roceOrder      []*roceDir
	conns          map[connKey]*tcpConn
	connOrder      []*tcpConn
	cmPairs        []cmPair
	badLinks       map[linkType]bool
	// headerCuts are the frames cut inside their UDP or TCP headers, decided at the end
	// (at most maxHeaderCuts; headerCutsDropped counts the rest).
	headerCuts        []headerCut
	headerCutsDropped int
	// unknownCuts are the frames cut short that nothing showed to be RDMA or not.
	unknownCuts frameSet
	pkt         Packet

	// UDP GSO super-datagrams (splitGSO): inGSO while one segment is decoded, and
	// buffers for the segments' headers and datagrams.
	inGSO      bool
	gsoScratch []byte
	gsoHdr     []byte
	gsoBuf     []byte
	gsoPayload []byte
	// gsoFrames are the frames split, gsoDatagrams the datagrams they made, gsoFirst
	// what the first one was: one note at the end (gsoNote).
	gsoFrames    frameSet
	gsoDatagrams int
	gsoFirst     string

	// filter is Options.Filter (nil: every packet is shown). dirFlow and connFlow give
	// the flow number of each RoCE direction and iWARP connection (by its index in
	// connOrder), as finish numbered them: for a filter by flow, the first pass's;
	// selectedFlows are the flows that filter selects. shownFrames are the frames
	// of the packets shown.
	filter        *Filter
	dirFlow       map[roceDirKey]int
	connFlow      map[int]int
	selectedFlows map[int]bool
	shownFrames   map[int]bool
	// live: a live capture (RunLive), where --flow and --qp match each
	// packet as it passes (liveSelects).
	live bool
}

func newDecoder(w io.Writer, opts Options) *decoder {
	d := &decoder{
		opts:           opts,
		out:            newOutput(w, opts.JSON),
		rdma:           map[int]bool{},
		roceDirs:       map[roceDirKey]*roceDir{},
		roceICRCErrors: map[roceDirKey]int{},
		conns:          map[connKey]*tcpConn{},
		badLinks:       map[linkType]bool{},
		filter:         opts.Filter,
		dirFlow:        map[roceDirKey]int{},
		connFlow:       map[int]int{},
		shownFrames:    map[int]bool{},
	}
	return d
}

// relTime returns the time of t since the first frame, in seconds.
func (d *decoder) relTime(t time.Time) float64 {
	if !d.haveT0 {
		return 0
	}
	return t.Sub(d.t0).Seconds()
}

func (d *decoder) fileProblem(err error) {
	var reason string
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		reason = fmt.Sprintf("capture file truncated: the record after frame %d is cut short", d.frame)
	} else {
		reason = fmt.Sprintf("unreadable record after frame %d: %v", d.frame, err)
	}
	p := Problem{Frame: 0, Reason: reason}
	d.res.Errors = append(d.res.Errors, p)
	d.out.fileError(p)
}

// errorf records an error for frame.
func (d *decoder) errorf(frame int, format string, args ...any) string {
	p := Problem{Frame: frame, Reason: fmt.Sprintf(format, args...)}
	d.res.Errors = append(d.res.Errors, p)
	return p.Reason
}

// cutError records for frame the error of a frame that the capture's snap length cut
// after its headers and that is otherwise good.
func (d *decoder) cutError(frame int, reason string) string {
	d.res.Errors = append(d.res.Errors, Problem{Frame: frame, Reason: reason, Cut: true})
	return reason
}

// notef records a note for frame.
func (d *decoder) notef(frame int, format string, args ...any) string {
	p := Problem{Frame: frame, Reason: fmt.Sprintf(format, args...)}
	d.res.Notes = append(d.res.Notes, p)
	return p.Reason
}

func (d *decoder) markRDMA(frame int) { d.rdma[frame] = true }

// problemBefore orders problems by frame, those of the file as a whole (frame 0) last.
func problemBefore(a, b Problem) bool {
	switch {
	case a.Frame == 0:
		return false
	case b.Frame == 0:
		return true
	}
	return a.Frame < b.Frame
}

// cutShort describes a frame the capture truncated, or "".
func cutShort(ci gopacket.CaptureInfo) string {
	if ci.Length > ci.CaptureLength {
		return fmt.Sprintf("frame cut short by the capture (%d of %d bytes)", ci.CaptureLength, ci.Length)
	}
	return ""
}

// cookedHeader returns the length of a Linux cooked capture header (tcpdump -i any) and
// the protocol it names, an Ethertype; ok is false if link is not a cooked capture or the
// frame is too short to hold its header.
//
// LINUX_SLL (113): packet type, ARPHRD type, address length, 8 address bytes, protocol
// (2 bytes at 14). LINUX_SLL2 (276): protocol (2 bytes at 0), reserved, interface
// index, ARPHRD type, packet type, address length, 8 address bytes: 20 bytes.
func cookedHeader(link linkType, frame []byte) (n int, proto uint16, ok bool) {
	switch link {
	case linkLinuxSLL:
		if len(frame) < 16 {
			return 0, 0, false
		}
		return 16, binary.BigEndian.Uint16(frame[14:16]), true
	case linkLinuxSLL2:
		if len(frame) < 20 {
			return 0, 0, false
		}
		return 20, binary.BigEndian.Uint16(frame[0:2]), true
	}
	return 0, 0, false
}

// handleFrame decodes one frame: RoCE first (roce.Frame), then TCP for iWARP.
func (d *decoder) handleFrame(frame []byte, ci gopacket.CaptureInfo, link linkType) {
	if !d.haveT0 {
		d.t0, d.haveT0 = ci.Timestamp, true
	}
	d.now = ci.Timestamp
	d.wire, d.captured = ci.Length, ci.CaptureLength
	var err error
	var first netLayer
	// data is the frame from the header parse starts at (first); a cooked
	// RoCEv1 frame (cookedV1) has none, its link header being all it has besides the GRH.
	data := frame
	cookedV1 := false
	switch link {
	case linkEthernet:
		err = d.rf.DecodeEthernet(data)
		first = layerEthernet
	case linkLinuxSLL, linkLinuxSLL2:
		n, proto, ok := cookedHeader(link, frame)
		if !ok {
			return
		}
		data = frame[n:]
		switch proto {
		case roce.EtherTypeIPv4, roce.EtherTypeIPv6:
			first = layerIPv4
			if proto == roce.EtherTypeIPv6 {
				first = layerIPv6
			}
			err = d.rf.DecodeIP(data)
		case roce.EtherTypeRoCEv1:
			cookedV1 = true
			err = d.rf.DecodeGRH(data)
		default:
			return // not IP, not RoCE (ARP, and the like)
		}
	case linkRaw, linkIPv4, linkIPv6:
		if len(data) == 0 {
			return
		}
		first = layerIPv4
		if data[0]>>4 == 6 {
			first = layerIPv6
		}
		err = d.rf.DecodeIP(data)
	default:
		if !d.badLinks[link] {
			d.badLinks[link] = true
			d.errorf(d.frame, "link type %d (%v) not supported: this frame and every later one of link type %d are not decoded", uint16(link), link, uint16(link))
		}
		return
	}
	if err == nil {
		d.roce(ci, nil)
		return
	}
	if errors.Is(err, roce.ErrNotRoCE) {
		d.other(data, first, ci)
		return
	}
	if errors.Is(err, roce.ErrTruncated) && d.decodeCut(frame, ci, link) {
		d.cutHeaders = true
		d.roce(ci, nil)
		d.cutHeaders = false
		return
	}
	// roce.Frame rejected the frame before it could tell whether it is RoCE: it is
	// only if parse finds Ethertype 0x8915 or UDP destination port 4791.
	if cookedV1 {
		d.hdr = netHeaders{}
		d.roce(ci, err)
		return
	}
	if d.isRoCE(data, first) {
		d.roce(ci, err)
		return
	}
	d.other(data, first, ci)
}

// maxWholeFrame bounds the length on the wire of a cut frame that decodeCut decodes
// whole: the largest IP packet, behind link headers.
const maxWholeFrame = 1<<16 + 64

// decodeCut decodes a RoCE frame that the capture's snap length cut short as if it were
// whole, the octets the capture lost read as zeros, and reports whether the octets
// captured hold all its headers: link, IP and UDP (or GRH), the BTH and every extension
// header its opcode carries. Then d.rf is a view of d.whole whose headers are all real;
// what it says of the payload and the ICRC must not be believed. A frame whose headers
// the capture cut is left to the caller (false).
func (d *decoder) decodeCut(data []byte, ci gopacket.CaptureInfo, link linkType) bool {
	if ci.Length <= len(data) || ci.Length > maxWholeFrame {
		return false
	}
	if cap(d.whole) < ci.Length {
		d.whole = make([]byte, ci.Length, max(ci.Length, 2048))
	}
	w := d.whole[:ci.Length]
	clear(w[copy(w, data):])
	var err error
	off := 0
	switch link {
	case linkEthernet:
		err = d.rf.DecodeEthernet(w)
	case linkLinuxSLL, linkLinuxSLL2:
		n, proto, ok := cookedHeader(link, data)
		if !ok {
			return false
		}
		off = n
		if proto == roce.EtherTypeRoCEv1 {
			err = d.rf.DecodeGRH(w[off:])
		} else {
			err = d.rf.DecodeIP(w[off:])
		}
	default:
		err = d.rf.DecodeIP(w)
	}
	if err != nil || len(d.rf.IB) == 0 {
		return false
	}
	hdr := off + d.rf.HeaderLen()
	d.cutWhole = hdr + len(d.rf.IB)
	return len(data) >= hdr+ibtransport.Opcode(d.rf.IB[0]).HeaderLen()
}

// netLayer is a header parse decodes, as a bit of netHeaders.found.
type netLayer uint8

const (
	layerEthernet netLayer = 1 << iota
	layerDot1Q
	layerIPv4
	layerIPv6
	layerTCP
	layerUDP
)

// netHeaders is what parse found of a frame's headers, each a view of the frame.
type netHeaders struct {
	found     netLayer
	etherType uint16      // Ethernet's Ethertype, or after its 802.1Q tag the inner one
	ip4       header.IPv4 // from the IPv4 header to the end of the IP packet (or frame)
	ip4Len    int         // the IPv4 total length (the frame's IP octets for a TSO 0)
	ip6       header.IPv6
	ipPayload []byte     // the IP payload the frame holds (less than declared if cut)
	udp       header.UDP // header and payload
	tcp       header.TCP // header and payload; it passes Check
}

// parse decodes data's link, IP and transport headers through package header's
// views, starting at first: Ethernet with at most one 802.1Q tag, IPv4 or IPv6
// (without extension headers), TCP or UDP. Each header is taken when the frame
// holds it whole and its length fields agree (an IP payload may be cut short);
// the walk stops at the first it cannot take, at one nothing follows, and after
// the IP header of a fragment.
func (d *decoder) parse(data []byte, first netLayer) {
	h := &d.hdr
	*h = netHeaders{}
	for next := first; len(data) > 0; {
		switch next {
		case layerEthernet:
			e := header.Ethernet(data)
			if len(e) < header.EthernetLen {
				return
			}
			h.found |= layerEthernet
			h.etherType, data = e.Type(), data[header.EthernetLen:]
			if e.Tagged() {
				if len(e) < header.EthernetLen+header.VLANTagLen {
					return
				}
				h.found |= layerDot1Q
				h.etherType, data = e.InnerType(), data[header.VLANTagLen:]
			}
			switch h.etherType {
			case header.EtherTypeIPv4:
				next = layerIPv4
			case header.EtherTypeIPv6:
				next = layerIPv6
			default:
				return
			}
		case layerIPv4:
			ip := header.IPv4(data)
			if len(ip) < header.IPv4MinLen {
				return
			}
			total, ihl := int(ip.TotalLength()), ip.HeaderLen()
			if total == 0 {
				total = len(ip) // TSO: the kernel leaves the length to the segments
			}
			if total < header.IPv4MinLen || ihl < header.IPv4MinLen || ihl > total || ihl > len(ip) {
				return
			}
			ip = ip[:min(total, len(ip))]
			h.found |= layerIPv4
			h.ip4, h.ip4Len, h.ipPayload = ip, total, ip[ihl:]
			if ip.FlagsFragment()&(header.IPv4FlagMF|0x1FFF) != 0 {
				return // a fragment: no transport header to parse
			}
			data, next = h.ipPayload, transportLayer(ip.Protocol())
		case layerIPv6:
			ip := header.IPv6(data)
			if len(ip) < header.IPv6Len || ip.PayloadLength() == 0 {
				return // (a jumbogram's payload length is 0: not taken)
			}
			h.found |= layerIPv6
			h.ip6, h.ipPayload = ip, ip[header.IPv6Len:min(len(ip), header.IPv6Len+int(ip.PayloadLength()))]
			data, next = h.ipPayload, transportLayer(ip.NextHeader())
		case layerUDP:
			u := header.UDP(data)
			if len(u) < header.UDPLen || u.Length() != 0 && u.Length() < header.UDPLen {
				return
			}
			h.found |= layerUDP
			h.udp = u
			return
		case layerTCP:
			t := header.TCP(data)
			if t.Check() != nil {
				return
			}
			h.found |= layerTCP
			h.tcp = t
			return
		default:
			return
		}
	}
}

// transportLayer returns the layer of IP protocol proto (0 for one parse does
// not decode).
func transportLayer(proto uint8) netLayer {
	switch proto {
	case ipProtoTCP:
		return layerTCP
	case ipProtoUDP:
		return layerUDP
	}
	return 0
}

// The IP protocol numbers of TCP and UDP.
const (
	ipProtoTCP = 6
	ipProtoUDP = 17
)

func (d *decoder) has(l netLayer) bool { return d.hdr.found&l != 0 }

// isRoCE reports whether a frame that roce.Frame rejected is addressed to RoCE.
func (d *decoder) isRoCE(data []byte, first netLayer) bool {
	d.parse(data, first)
	switch {
	case d.has(layerUDP):
		return d.hdr.udp.DstPort() == roce.UDPPort
	case d.has(layerIPv4) || d.has(layerIPv6):
		// A UDP header cut short (parse needs all 8 bytes) still shows the
		// destination port once 4 bytes of it are there.
		ip, ok := d.ipView()
		return ok && ip.proto == ipProtoUDP && len(ip.payload) >= 4 &&
			header.UDP(ip.payload).DstPort() == roce.UDPPort
	case d.has(layerEthernet):
		return d.hdr.etherType == roce.EtherTypeRoCEv1
	}
	return false
}

// ipInfo is what the IP header of the frame parse decoded says.
type ipInfo struct {
	src, dst netip.Addr
	proto    uint8
	declared int    // the IP payload length the header declares
	payload  []byte // the IP payload the frame holds (less than declared if cut short)
}

// ipView returns the IP header fields of the frame d.parse decoded; ok is false for an
// IPv4 fragment after the first, or a frame without IP.
func (d *decoder) ipView() (ip ipInfo, ok bool) {
	h := &d.hdr
	switch {
	case d.has(layerIPv4):
		if h.ip4.FragmentOffset() != 0 {
			return ip, false
		}
		ip.src, ip.dst = h.ip4.Src(), h.ip4.Dst()
		ip.proto, ip.payload = h.ip4.Protocol(), h.ipPayload
		ip.declared = h.ip4Len - h.ip4.HeaderLen()
	case d.has(layerIPv6):
		ip.src, ip.dst = h.ip6.Src(), h.ip6.Dst()
		ip.proto, ip.payload = h.ip6.NextHeader(), h.ipPayload
		ip.declared = int(h.ip6.PayloadLength())
	default:
		return ip, false
	}
	ip.src, ip.dst = ip.src.Unmap(), ip.dst.Unmap()
	return ip, true
}

// frameCut says how the frame is shorter than its IP header declares, or "": cut by
// the capture's snap length, or (captured whole) sent short.
func frameCut(ci gopacket.CaptureInfo, ip *ipInfo) string {
	if s := cutShort(ci); s != "" {
		return s
	}
	if len(ip.payload) < ip.declared {
		return fmt.Sprintf("frame cut short: it holds %d of the %d IP payload bytes its IP header declares", len(ip.payload), ip.declared)
	}
	return ""
}

// minTCPHeader is how much of a TCP header the decoder needs to follow the segment in
// its stream: ports, sequence and acknowledgment numbers, data offset and flags.
const minTCPHeader = 14

// other handles a frame that is not RoCE: TCP segments go to the iWARP reassembly.
func (d *decoder) other(data []byte, first netLayer, ci gopacket.CaptureInfo) {
	d.parse(data, first)
	ip, ok := d.ipView()
	if !ok || d.has(layerIPv4) && d.hdr.ip4.FlagsFragment()&header.IPv4FlagMF != 0 {
		return // not IP, or a fragment: the decoder does not reassemble IP
	}
	if !d.has(layerTCP) {
		switch {
		case ip.proto == ipProtoTCP:
			d.tcpHeaderCut(ci, &ip)
		case ip.proto == ipProtoUDP && !d.has(layerUDP) && len(ip.payload) < 4:
			// Too little of the UDP header to see the port: RoCE if the addresses
			// carry RoCE (decided at the end).
			d.addHeaderCut(headerCut{frame: d.frame, udp: true, src: ip.src, dst: ip.dst,
				visible: append([]byte(nil), ip.payload...),
				reason:  fmt.Sprintf("%s inside the UDP header (%d of 8 bytes)", frameCut(ci, &ip), len(ip.payload))})
		}
		return
	}
	t := d.hdr.tcp
	payload := t.Payload()
	wireLen := max(ip.declared-t.HeaderLen(), len(payload))
	seg := tcpSegmentInfo{
		src:     netip.AddrPortFrom(ip.src, t.SrcPort()),
		dst:     netip.AddrPortFrom(ip.dst, t.DstPort()),
		seq:     t.Seq(),
		ackNum:  t.Ack(),
		syn:     t.Flags()&header.TCPFlagSYN != 0,
		ack:     t.Flags()&header.TCPFlagACK != 0,
		fin:     t.Flags()&header.TCPFlagFIN != 0,
		rst:     t.Flags()&header.TCPFlagRST != 0,
		payload: payload,
		wireLen: wireLen,
	}
	if wireLen > len(payload) {
		seg.cut = frameCut(ci, &ip)
	}
	d.tcpSegment(&seg)
}

// tcpHeaderCut handles a TCP segment whose header the frame does not hold whole (parse
// gives up on it). With the fields the stream needs (minTCPHeader bytes) it is followed
// as a segment whose payload the capture lost; with less, the frame is matched at the end
// against the iWARP connections by its addresses and the port bytes it shows.
func (d *decoder) tcpHeaderCut(ci gopacket.CaptureInfo, ip *ipInfo) {
	b := header.TCP(ip.payload)
	want := "at least 20"
	if len(b) > 12 {
		want = strconv.Itoa(b.HeaderLen())
	}
	reason := fmt.Sprintf("%s inside the TCP header (%d of %s bytes)", frameCut(ci, ip), len(b), want)
	if len(b) >= minTCPHeader && b.HeaderLen() >= header.TCPMinLen {
		flags := b.Flags()
		seg := tcpSegmentInfo{
			src:     netip.AddrPortFrom(ip.src, b.SrcPort()),
			dst:     netip.AddrPortFrom(ip.dst, b.DstPort()),
			seq:     b.Seq(),
			ackNum:  b.Ack(),
			fin:     flags&header.TCPFlagFIN != 0,
			syn:     flags&header.TCPFlagSYN != 0,
			rst:     flags&header.TCPFlagRST != 0,
			ack:     flags&header.TCPFlagACK != 0,
			wireLen: max(0, ip.declared-b.HeaderLen()),
			cut:     reason,
		}
		d.tcpSegment(&seg)
		return
	}
	if len(b) > 12 && ip.declared <= b.HeaderLen() || ip.declared <= header.TCPMinLen {
		return // no payload: a bare SYN, ACK or FIN, which carries no RDMA
	}
	d.addHeaderCut(headerCut{frame: d.frame, src: ip.src, dst: ip.dst,
		visible: append([]byte(nil), b[:min(len(b), 4)]...), reason: reason,
		// Without the data offset, a segment no longer than the longest TCP header
		// may be bare.
		mayBeBare: len(b) <= 12 && ip.declared <= 60})
}

// maxHeaderCuts bounds the frames cut inside their headers that are kept to be decided
// at the end: a capture taken with a tiny snap length must not make the decoder hold a
// record per frame.
const maxHeaderCuts = 1 << 14

func (d *decoder) addHeaderCut(h headerCut) {
	if len(d.headerCuts) >= maxHeaderCuts {
		d.headerCutsDropped++
		return
	}
	d.headerCuts = append(d.headerCuts, h)
}

// headerCut is a frame cut short inside its UDP or TCP header, before the fields that
// would tell whether it is RDMA: the addresses and the port bytes it shows decide at the
// end of the capture.
type headerCut struct {
	frame    int
	udp      bool
	src, dst netip.Addr
	visible  []byte // the first (at most 4) bytes of the UDP or TCP header
	reason   string
	// mayBeBare: a TCP segment that may carry no data (a bare ACK with options): it
	// counts only if its direction of the connection lost octets.
	mayBeBare bool
}

// portsMatch reports whether the visible header bytes agree with the ports.
func (h *headerCut) portsMatch(src, dst uint16) bool {
	var ports [4]byte
	binary.BigEndian.PutUint16(ports[0:2], src)
	binary.BigEndian.PutUint16(ports[2:4], dst)
	return string(h.visible) == string(ports[:len(h.visible)])
}

// dstPortMatch reports whether the visible header bytes agree with destination port
// dst (whatever the source port).
func (h *headerCut) dstPortMatch(dst uint16) bool {
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], dst)
	for i := 2; i < len(h.visible); i++ {
		if h.visible[i] != port[i-2] {
			return false
		}
	}
	return true
}

// resolveHeaderCuts reports the frames cut inside their UDP or TCP headers that belong
// to RDMA flows: a UDP frame between addresses that carry RoCEv2 (its port bytes, as far
// as they go, agreeing with 4791), a TCP frame of an iWARP connection. The others, with
// the cut segments of TCP connections never classified, are one error: nothing says they
// are RDMA, nor that they are not.
func (d *decoder) resolveHeaderCuts() {
	for i := range d.headerCuts {
		h := &d.headerCuts[i]
		what := ""
		if h.udp {
			for _, r := range d.roceOrder {
				if r.version == roce.RoCEv2.String() && r.key.src == h.src && r.key.dst == h.dst && h.dstPortMatch(roce.UDPPort) {
					what = fmt.Sprintf("udp %s → %s: %s: probably RoCEv2 (these addresses carry RoCEv2 in this capture)", h.src, h.dst, h.reason)
					break
				}
			}
		} else if c, i := d.headerCutConn(h); c != nil && c.state == connOther {
			continue // a connection found not to be iWARP
		} else if c != nil && c.state == connIWARP {
			what = "bare"
			if !h.mayBeBare || c.dirs[i].stream.lostBytes > 0 {
				what = fmt.Sprintf("tcp %s → %s: %s: a segment of the iWARP connection %s ↔ %s", h.src, h.dst, h.reason, c.ends[i], c.ends[1-i])
				c.errors++
			}
		}
		switch what {
		case "":
			if !h.mayBeBare {
				d.unknownCuts.add(h.frame)
			}
			continue
		case "bare":
			continue // its direction lost nothing: it carried no data
		}
		d.markRDMA(h.frame)
		d.errorf(h.frame, "%s", what)
	}
	d.unknownCuts.n += d.headerCutsDropped
	if d.unknownCuts.n > 0 {
		// Nothing verifies these frames, nor says they need no verifying: one error for
		// all of them, so that a capture too short to show its RDMA does not pass.
		first := 0
		if len(d.unknownCuts.frames) > 0 {
			first = d.unknownCuts.frames[0]
		}
		d.errorf(first, "%s cut short before anything in them or their flows shows whether they are RDMA (the start of their TCP connection, or their UDP or TCP ports, is what was cut): not verified",
			d.unknownCuts.String())
	}
}

// headerCutConn returns the TCP connection (and the index of the direction) a frame cut
// inside its TCP header belongs to, by its addresses and the port bytes it shows: of
// several, an iWARP one, the last opened before the frame.
func (d *decoder) headerCutConn(h *headerCut) (*tcpConn, int) {
	var best *tcpConn
	bestDir := 0
	for _, c := range d.connOrder {
		if best != nil && (c.created > h.frame || best.state == connIWARP && c.state != connIWARP) {
			continue
		}
		for i, e := range c.ends {
			o := c.ends[1-i]
			if e.Addr() == h.src && o.Addr() == h.dst && h.portsMatch(e.Port(), o.Port()) {
				best, bestDir = c, i
				break
			}
		}
	}
	return best, bestDir
}

// frameSet counts frames and keeps the first few of them to name.
type frameSet struct {
	frames []int
	n      int
}

// add counts frame, keeping the lowest 8 frame numbers.
func (s *frameSet) add(frame int) {
	s.n++
	i := sort.SearchInts(s.frames, frame)
	if i >= 8 {
		return
	}
	s.frames = append(s.frames, 0)
	copy(s.frames[i+1:], s.frames[i:])
	s.frames[i] = frame
	s.frames = s.frames[:min(len(s.frames), 8)]
}

// String names the frames as "frame 4", "frames 4, 6, 9" or "frames 4, 6, 9, … (12 in all)".
func (s *frameSet) String() string {
	if len(s.frames) == 0 {
		return fmt.Sprintf("%d frames", s.n)
	}
	if s.n == 1 && len(s.frames) == 1 {
		return fmt.Sprintf("frame %d", s.frames[0])
	}
	var b strings.Builder
	b.WriteString("frames ")
	for i, f := range s.frames {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(f))
	}
	if s.n > len(s.frames) {
		fmt.Fprintf(&b, ", … (%d in all)", s.n)
	}
	return b.String()
}

// numberFlows orders the flows by their first packet (with a filter too: the first
// packet of the flow, shown or not) and numbers them from 1, records the flow of each
// RoCE direction and iWARP connection (d.dirFlow, d.connFlow) and, with a filter,
// keeps only the flows of the packets shown.
func (d *decoder) numberFlows() {
	flows := d.res.Flows
	sort.SliceStable(flows, func(i, j int) bool { return flows[i].order < flows[j].order })
	kept := flows[:0]
	for i := range flows {
		fs := &flows[i]
		fs.ID = i + 1
		for _, k := range fs.dirKeys {
			d.dirFlow[k] = fs.ID
		}
		if fs.conn > 0 {
			d.connFlow[fs.conn-1] = fs.ID
		}
		shown := fs.shown && (d.selectedFlows == nil || d.selectedFlows[fs.ID])
		if fs.series != nil {
			if d.res.series == nil {
				d.res.series = map[int]*flowSeries{}
			}
			d.res.series[fs.ID] = fs.series
		}
		fs.order, fs.dirKeys, fs.conn, fs.shown, fs.series = 0, nil, 0, false, nil
		if d.filter == nil || shown {
			kept = append(kept, *fs)
		}
	}
	d.res.Flows = kept
	if len(kept) == 0 {
		d.res.Flows = nil
	}
}

// finish ends the run: it closes the TCP streams, builds the flow summaries and prints
// the summary.
func (d *decoder) finish() {
	for _, c := range d.connOrder {
		d.closeConn(c)
	}
	d.resolveHeaderCuts()
	d.gsoNote()
	// Problems found at the end (cut frames decided late) go among the others by frame;
	// damage to the file itself (frame 0) comes last, where it was found.
	sort.SliceStable(d.res.Errors, func(i, j int) bool { return problemBefore(d.res.Errors[i], d.res.Errors[j]) })
	sort.SliceStable(d.res.Notes, func(i, j int) bool { return problemBefore(d.res.Notes[i], d.res.Notes[j]) })
	d.res.Flows = d.roceFlows()
	for _, c := range d.connOrder {
		if c.state == connIWARP {
			d.res.Flows = append(d.res.Flows, c.summary(d))
		}
	}
	d.numberFlows()
	d.res.Frames = d.frame
	rdma := d.rdma
	if d.filter != nil {
		// The totals are those of the packets shown, and the problems of their frames
		// (and of the file).
		rdma = d.shownFrames
		keep := func(ps []Problem) []Problem {
			var out []Problem
			for _, p := range ps {
				if p.Frame == 0 || d.shownFrames[p.Frame] {
					out = append(out, p)
				}
			}
			return out
		}
		d.res.Errors, d.res.Notes = keep(d.res.Errors), keep(d.res.Notes)
		d.res.Filter = d.filter.String()
	}
	for f := range rdma {
		d.res.RDMAFrameNumbers = append(d.res.RDMAFrameNumbers, f)
	}
	sort.Ints(d.res.RDMAFrameNumbers)
	d.res.RDMAFrames = len(d.res.RDMAFrameNumbers)
	for _, p := range d.res.Errors {
		if p.Cut {
			d.res.Cut++
		}
	}
	if d.opts.Summary {
		d.out.summary(&d.res, d.opts.Flows)
	}
}
