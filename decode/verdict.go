package decode

import (
	"strconv"
	"strings"
)

// Verdict is softrdma's verdict on one RDMA packet (Options.Verdicts): what the packet
// is and what is right or wrong with it, as one line of text, the pcapng comment that
// Annotate gives its frame.
type Verdict struct {
	Frame int
	Text  string
}

// emit prints a packet if the filter shows it (sel) and counts it in Result.Packets
// (if it is one, not an error found in a stream between packets), and with
// Options.Verdicts keeps its verdict, shown or not.
func (d *decoder) emit(p *Packet, sel, isPacket bool) {
	if d.opts.Verdicts {
		d.res.Verdicts = append(d.res.Verdicts, Verdict{Frame: p.Frame, Text: verdictText(p)})
	}
	if !sel {
		return
	}
	if isPacket {
		d.res.Packets++
	}
	if d.filter != nil {
		d.shownFrames[p.Frame] = true
	}
	d.out.packet(p)
}

// opcodeFilterName is the name --opcode matches p by: its opcode, and for
// an Acknowledge that is a NAK or RNR NAK, the AETH's syndrome and NAK code
// too ("RC Acknowledge NAK PSN sequence error"), so that --opcode nak or
// --opcode rnr finds the NAKs, which are no opcode of their own.
func opcodeFilterName(p *Packet) string {
	if a := p.AETH; a != nil && strings.Contains(a.Syndrome, "NAK") {
		return p.Opcode + " " + a.Syndrome + " " + a.NAKCode
	}
	return p.Opcode
}

// selects reports whether the filter shows packet p of flow (0: not known).
func (d *decoder) selects(p *Packet, flow int) bool {
	f := d.filter
	if f == nil {
		return true
	}
	if !f.inTime(p.Time) || !f.opcodeMatch(opcodeFilterName(p)) {
		return false
	}
	if !f.needsFlows() || d.selectedFlows[flow] {
		return true
	}
	if d.live {
		return d.liveSelects(p)
	}
	// A packet to a QP asked for, in no flow selected (one with a wrong ICRC).
	if len(f.Flows) == 0 && p.DestQP != nil {
		for _, q := range f.QPs {
			if q == *p.DestQP {
				return true
			}
		}
	}
	return false
}

// selectsConn reports whether the filter shows packet p of an iWARP connection, and
// notes that the connection has a packet shown.
func (d *decoder) selectsConn(p *Packet, c *tcpConn) bool {
	sel := d.selects(p, d.connFlow[c.idx])
	c.shown = c.shown || sel
	return sel
}

// verdictText describes a packet and softrdma's verdict on it: the header fields of its
// line, then each check, separated by "; ": the ICRC or MPA CRC, a PSN gap before it, a
// duplicate PSN, what a NAK means, a cut by the snap length, its note and its error.
func verdictText(p *Packet) string {
	b := make([]byte, 0, 256)
	b = append(b, "softrdma: "...)
	b = appendPacket(b, p)
	switch p.ICRC {
	case "ok":
		b = append(b, "; ICRC ok"...)
	case "bad":
		b = append(b, "; ICRC BAD: the packet is not what its sender sent, and is kept out of the statistics"...)
	}
	if p.Transport == "iWARP" && p.Opcode != "MPA Request" && p.Opcode != "MPA Reply" {
		switch p.CRC {
		case "ok":
			b = append(b, "; MPA CRC ok"...)
		case "bad":
			b = append(b, "; MPA CRC BAD: the FPDU is not what its sender sent"...)
		case "none":
			b = append(b, "; no MPA CRC (not negotiated)"...)
		}
	}
	if p.PSNGap != nil {
		b = append(b, "; PSN GAP: "...)
		b = strconv.AppendInt(b, int64(*p.PSNGap), 10)
		if *p.PSNGap == 1 {
			b = append(b, " PSN missing just before this packet (lost, or not captured)"...)
		} else {
			b = append(b, " PSNs missing just before this packet (lost, or not captured)"...)
		}
	}
	if p.Duplicate {
		b = append(b, "; DUPLICATE: this PSN was seen before (a retransmission)"...)
	}
	if a := p.AETH; a != nil {
		switch a.Syndrome {
		case "NAK":
			b = append(b, "; NAK "+a.NAKCode+": "+nakMeaning(a.NAKCode)...)
		case "RNR NAK":
			b = append(b, "; RNR NAK: the responder had no receive buffer posted; the requester sends the request again after "+a.RNRDelay...)
		}
	}
	if p.Cut {
		b = append(b, "; CUT by the snap length ("...)
		b = strconv.AppendInt(b, int64(p.CapLen), 10)
		b = append(b, " of "...)
		b = strconv.AppendInt(b, int64(p.OrigLen), 10)
		b = append(b, " bytes captured): headers decoded, payload and CRC not verified"...)
	}
	if p.Note != "" {
		b = append(b, "; note: "+p.Note...)
	}
	if p.Error != "" {
		b = append(b, "; ERROR: "+p.Error...)
	}
	return strings.ToValidUTF8(string(b), "?")
}

// nakMeaning says what a NAK code (as ibtransport.NAKCode names it) tells the
// requester (IBTA Vol1 9.7.5.2.4 and Table 43).
func nakMeaning(code string) string {
	switch code {
	case "PSN sequence error":
		return "the responder expected an earlier PSN (packets were lost or reordered); the requester goes back and resends from the PSN this NAK carries"
	case "invalid request":
		return "the responder cannot execute the request (unsupported opcode, bad length, or no receive queue); the QP goes to the error state"
	case "remote access error":
		return "the R_Key, address range or access rights of the request do not check out at the responder; the QP goes to the error state"
	case "remote operational error":
		return "the responder failed to carry out a valid request (a local error of its own); the QP goes to the error state"
	case "invalid RD request":
		return "an invalid Reliable Datagram request"
	}
	return "a reserved NAK code"
}
