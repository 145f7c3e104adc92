package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

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
}

// Problem is something wrong with one frame, or with the file (Frame 0).
type Problem struct {
	// Frame is the 1-based frame number, 0 for the file as a whole.
	Frame int
	// Reason says what is wrong, naming the field and value.
	Reason string
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
	// (start frame or FPDU) of a reassembled TCP stream ends; RDMAFrameNumbers lists them.
	RDMAFrames       int
	RDMAFrameNumbers []int
	// Packets is the number of RDMA packets printed: RoCE packets and MPA frames.
	Packets int
	// Errors are the bad frames (malformed headers, wrong CRCs) and file damage.
	Errors []Problem
	// Notes are observations that are not errors: a capture starting mid-stream, bytes
	// the capture lost, a connection cut off by the end of the capture.
	Notes []Problem
	// Flows summarizes each RoCE QP pair and each iWARP connection.
	Flows []FlowSummary
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
// is non-nil only if r is not a capture (it wraps ErrNotCapture) or w fails; problems
// with frames, and a file cut short, are in Result.Errors.
func Run(r io.Reader, w io.Writer, opts Options) (Result, error) {
	src, err := openCapture(r)
	if err != nil {
		return Result{}, err
	}
	d := newDecoder(w, opts)
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
	return d.res, d.out.err
}

// decoder holds the state of one Run.
type decoder struct {
	opts  Options
	out   *output
	res   Result
	frame int

	t0     time.Time
	haveT0 bool
	now    time.Time
	wire   int // the current frame's length on the wire

	rf roce.Frame
	ib ibtransport.Packet

	// gopacket layers for everything that is not RoCE (TCP for iWARP, and telling
	// UDP port 4791 apart when roce.Frame rejects a frame).
	eth     layers.Ethernet
	dot1q   layers.Dot1Q
	sll     layers.LinuxSLL
	ip4     layers.IPv4
	ip6     layers.IPv6
	tcp     layers.TCP
	udp     layers.UDP
	parsers map[gopacket.LayerType]*gopacket.DecodingLayerParser
	decoded []gopacket.LayerType

	rdma      map[int]bool // frames counted as RDMA
	roceDirs  map[roceDirKey]*roceDir
	roceOrder []*roceDir
	conns     map[connKey]*tcpConn
	connOrder []*tcpConn
	cmPairs   []cmPair
	badLinks  map[layers.LinkType]bool
	pkt       Packet
}

func newDecoder(w io.Writer, opts Options) *decoder {
	d := &decoder{
		opts:     opts,
		out:      newOutput(w, opts.JSON),
		rdma:     map[int]bool{},
		roceDirs: map[roceDirKey]*roceDir{},
		conns:    map[connKey]*tcpConn{},
		badLinks: map[layers.LinkType]bool{},
		parsers:  map[gopacket.LayerType]*gopacket.DecodingLayerParser{},
		decoded:  make([]gopacket.LayerType, 0, 8),
	}
	for _, first := range []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeLinuxSLL, layers.LayerTypeIPv4, layers.LayerTypeIPv6} {
		p := gopacket.NewDecodingLayerParser(first, &d.eth, &d.dot1q, &d.sll, &d.ip4, &d.ip6, &d.tcp, &d.udp)
		p.IgnoreUnsupported = true
		d.parsers[first] = p
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
	reason := err.Error()
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

// notef records a note for frame.
func (d *decoder) notef(frame int, format string, args ...any) string {
	p := Problem{Frame: frame, Reason: fmt.Sprintf(format, args...)}
	d.res.Notes = append(d.res.Notes, p)
	return p.Reason
}

func (d *decoder) markRDMA(frame int) { d.rdma[frame] = true }

// cutShort describes a frame the capture truncated, or "".
func cutShort(ci gopacket.CaptureInfo) string {
	if ci.Length > ci.CaptureLength {
		return fmt.Sprintf("frame cut short by the capture (%d of %d bytes)", ci.CaptureLength, ci.Length)
	}
	return ""
}

// handleFrame decodes one frame: RoCE first (roce.Frame), then TCP for iWARP.
func (d *decoder) handleFrame(data []byte, ci gopacket.CaptureInfo, link layers.LinkType) {
	if !d.haveT0 {
		d.t0, d.haveT0 = ci.Timestamp, true
	}
	d.now = ci.Timestamp
	d.wire = ci.Length
	var err error
	var first gopacket.LayerType
	switch link {
	case layers.LinkTypeEthernet:
		err = d.rf.DecodeEthernet(data)
		first = layers.LayerTypeEthernet
	case layers.LinkTypeLinuxSLL:
		first = layers.LayerTypeLinuxSLL
		if len(data) < 16 {
			return
		}
		switch proto := binary.BigEndian.Uint16(data[14:16]); proto {
		case roce.EtherTypeIPv4, roce.EtherTypeIPv6:
			err = d.rf.DecodeIP(data[16:])
		case roce.EtherTypeRoCEv1:
			err = d.rf.DecodeGRH(data[16:])
		default:
			err = roce.ErrNotRoCE
		}
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		if len(data) == 0 {
			return
		}
		first = layers.LayerTypeIPv4
		if data[0]>>4 == 6 {
			first = layers.LayerTypeIPv6
		}
		err = d.rf.DecodeIP(data)
	default:
		if !d.badLinks[link] {
			d.badLinks[link] = true
			d.notef(d.frame, "link type %v (%d) not supported: its frames are skipped", link, int(link))
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
	// roce.Frame rejected the frame before it could tell whether it is RoCE: it is
	// only if gopacket finds Ethertype 0x8915 or UDP destination port 4791.
	if d.isRoCE(data, first, link) {
		d.roce(ci, err)
		return
	}
	d.other(data, first, ci)
}

// parse decodes data with gopacket's layers, starting at first.
func (d *decoder) parse(data []byte, first gopacket.LayerType) {
	d.decoded = d.decoded[:0]
	_ = d.parsers[first].DecodeLayers(data, &d.decoded)
}

func (d *decoder) has(t gopacket.LayerType) bool {
	for _, x := range d.decoded {
		if x == t {
			return true
		}
	}
	return false
}

// isRoCE reports whether a frame that roce.Frame rejected is addressed to RoCE.
func (d *decoder) isRoCE(data []byte, first gopacket.LayerType, link layers.LinkType) bool {
	d.parse(data, first)
	switch {
	case d.has(layers.LayerTypeUDP):
		return d.udp.DstPort == roce.UDPPort
	case d.has(layers.LayerTypeDot1Q):
		return d.dot1q.Type == roce.EtherTypeRoCEv1
	case d.has(layers.LayerTypeEthernet) && !d.has(layers.LayerTypeIPv4) && !d.has(layers.LayerTypeIPv6):
		return d.eth.EthernetType == roce.EtherTypeRoCEv1
	case link == layers.LinkTypeLinuxSLL && len(data) >= 16:
		return binary.BigEndian.Uint16(data[14:16]) == roce.EtherTypeRoCEv1
	}
	return false
}

// other handles a frame that is not RoCE: TCP segments go to the iWARP reassembly.
func (d *decoder) other(data []byte, first gopacket.LayerType, ci gopacket.CaptureInfo) {
	d.parse(data, first)
	if !d.has(layers.LayerTypeTCP) {
		return
	}
	var src, dst netip.Addr
	var ipPayload int // the IP payload length the headers declare
	switch {
	case d.has(layers.LayerTypeIPv4):
		src, _ = netip.AddrFromSlice(d.ip4.SrcIP)
		dst, _ = netip.AddrFromSlice(d.ip4.DstIP)
		ipPayload = int(d.ip4.Length) - int(d.ip4.IHL)*4
		if d.ip4.Flags&layers.IPv4MoreFragments != 0 || d.ip4.FragOffset != 0 {
			return
		}
	case d.has(layers.LayerTypeIPv6):
		src, _ = netip.AddrFromSlice(d.ip6.SrcIP)
		dst, _ = netip.AddrFromSlice(d.ip6.DstIP)
		ipPayload = int(d.ip6.Length)
	default:
		return
	}
	tcpHdr := int(d.tcp.DataOffset) * 4
	wireLen := ipPayload - tcpHdr
	if wireLen < len(d.tcp.Payload) {
		wireLen = len(d.tcp.Payload)
	}
	seg := tcpSegmentInfo{
		src:     netip.AddrPortFrom(src.Unmap(), uint16(d.tcp.SrcPort)),
		dst:     netip.AddrPortFrom(dst.Unmap(), uint16(d.tcp.DstPort)),
		seq:     d.tcp.Seq,
		ackNum:  d.tcp.Ack,
		syn:     d.tcp.SYN,
		ack:     d.tcp.ACK,
		fin:     d.tcp.FIN,
		rst:     d.tcp.RST,
		payload: d.tcp.Payload,
		wireLen: wireLen,
		cut:     cutShort(ci),
	}
	d.tcpSegment(&seg)
}

// finish ends the run: it closes the TCP streams, builds the flow summaries and prints
// the summary.
func (d *decoder) finish() {
	for _, c := range d.connOrder {
		d.closeConn(c)
	}
	d.res.Flows = d.roceFlows()
	for _, c := range d.connOrder {
		if c.state == connIWARP {
			d.res.Flows = append(d.res.Flows, c.summary(d))
		}
	}
	sort.SliceStable(d.res.Flows, func(i, j int) bool { return d.res.Flows[i].First < d.res.Flows[j].First })
	d.res.Frames = d.frame
	for f := range d.rdma {
		d.res.RDMAFrameNumbers = append(d.res.RDMAFrameNumbers, f)
	}
	sort.Ints(d.res.RDMAFrameNumbers)
	d.res.RDMAFrames = len(d.res.RDMAFrameNumbers)
	if d.opts.Summary {
		d.out.summary(&d.res, d.opts.Flows)
	}
}
