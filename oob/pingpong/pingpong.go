// Package pingpong speaks the out-of-band exchange of rdma-core's ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (libibverbs/examples/*.c,
// rdma-core 44.0), so that softrdma's pingpong command can run against the real tools.
//
// Over one TCP connection to port 18515 each side sends, for each of its QPs, the text
// message
//
//	printf("%04x:%06x:%06x:%s", lid, qpn, psn, gid)   + NUL = 52 bytes
//
// where gid is the 16 raw GID bytes as 32 lowercase hex digits, in order. The client
// writes its messages, reads the server's, writes "done" (5 bytes with the NUL) and
// closes; the server reads the client's messages, moves its QPs to RTR/RTS, writes its
// own messages and reads "done". Client and Server implement the two sides; the server's
// QP work happens in a callback between its read and its write, as in the real tool.
package pingpong

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/oob"
)

// DefaultPort is the TCP port the tools listen on and connect to (their -p default).
const DefaultPort = 18515

// MessageSize is the size of one QP message on the wire: 51 characters and the NUL
// (the tools size it as sizeof "0000:000000:000000:" plus 32 zeros).
const MessageSize = 52

// Done is the client's closing message, the string "done" with its NUL.
const Done = "done\x00"

// Field widths of the message, in hex digits, and the offsets of its separators.
const (
	lidDigits = 4
	qpnDigits = 6
	psnDigits = 6
	gidDigits = 32

	qpnOff = lidDigits + 1
	psnOff = qpnOff + qpnDigits + 1
	gidOff = psnOff + psnDigits + 1
	nulOff = gidOff + gidDigits // 51
)

const msgName = "pingpong dest"

// Dest is what one side tells the other about one of its QPs.
type Dest struct {
	// LID is the port's LID (0 on RoCE).
	LID uint16
	// QPN is the QP number (24 bits).
	QPN uint32
	// PSN is the first PSN the QP will send (24 bits; random, lrand48() & 0xffffff).
	// ibv_ud_pingpong sends it too although UD does not use it.
	PSN uint32
	// GID is the source GID of the port's GID index given with -g, all zeros without -g.
	GID [16]byte
}

// String formats d as the tools print it: "LID 0x0000, QPN 0x000011, PSN 0x2bbfb2, GID
// ::ffff:10.77.0.21".
func (d Dest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s",
		d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID))
}

// AppendBinary appends the 52-byte wire message for d to b. It fails if QPN or PSN do
// not fit 24 bits (the tool would print more digits and overrun its buffer).
func (d *Dest) AppendBinary(b []byte) ([]byte, error) {
	if d.QPN > 0xffffff {
		return b, &oob.Error{Message: msgName, Field: "qpn", Value: hex32(d.QPN), Reason: "> 0xffffff", Err: oob.ErrRange}
	}
	if d.PSN > 0xffffff {
		return b, &oob.Error{Message: msgName, Field: "psn", Value: hex32(d.PSN), Reason: "> 0xffffff", Err: oob.ErrRange}
	}
	b = appendHex(b, uint64(d.LID), lidDigits)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN), qpnDigits)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN), psnDigits)
	b = append(b, ':')
	b = hex.AppendEncode(b, d.GID[:])
	return append(b, 0), nil
}

// MarshalBinary returns the 52-byte wire message for d.
func (d *Dest) MarshalBinary() ([]byte, error) {
	return d.AppendBinary(make([]byte, 0, MessageSize))
}

// UnmarshalBinary parses a 52-byte wire message. It accepts exactly the layout the tools
// print (fixed widths, ':' separators, a NUL after the GID), upper or lower case hex;
// anything else is an *oob.Error. It does not allocate unless it fails.
func (d *Dest) UnmarshalBinary(b []byte) error {
	if len(b) != MessageSize {
		r := oob.ErrTruncated
		if len(b) > MessageSize {
			r = oob.ErrSyntax
		}
		return &oob.Error{Message: msgName, Field: "length", Value: strconv.Itoa(len(b)), Reason: "want 52", Err: r}
	}
	for _, off := range [...]int{qpnOff - 1, psnOff - 1, gidOff - 1} {
		if b[off] != ':' {
			return &oob.Error{Message: msgName, Field: "separator", Value: strconv.Quote(string(b[off : off+1])),
				Reason: "at offset " + strconv.Itoa(off) + ", want ':'", Err: oob.ErrSyntax}
		}
	}
	if b[nulOff] != 0 {
		return &oob.Error{Message: msgName, Field: "terminator", Value: strconv.Quote(string(b[nulOff:])),
			Reason: "want NUL", Err: oob.ErrSyntax}
	}
	lid, err := parseHex(b[:lidDigits], "lid")
	if err != nil {
		return err
	}
	qpn, err := parseHex(b[qpnOff:qpnOff+qpnDigits], "qpn")
	if err != nil {
		return err
	}
	psn, err := parseHex(b[psnOff:psnOff+psnDigits], "psn")
	if err != nil {
		return err
	}
	var gid [16]byte
	for i := range gid {
		v, err := parseHex(b[gidOff+2*i:gidOff+2*i+2], "gid")
		if err != nil {
			return err
		}
		gid[i] = byte(v)
	}
	*d = Dest{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(psn), GID: gid}
	return nil
}

// appendHex appends v as exactly n lowercase hex digits (v must fit).
func appendHex(b []byte, v uint64, n int) []byte {
	const digits = "0123456789abcdef"
	for i := n - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*uint(i)))&0xf])
	}
	return b
}

// parseHex parses a run of hex digits (either case).
func parseHex(s []byte, field string) (uint64, error) {
	var v uint64
	for _, c := range s {
		var n byte
		switch {
		case c >= '0' && c <= '9':
			n = c - '0'
		case c >= 'a' && c <= 'f':
			n = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			n = c - 'A' + 10
		default:
			return 0, &oob.Error{Message: msgName, Field: field, Value: strconv.Quote(string(s)), Reason: "not hex", Err: oob.ErrSyntax}
		}
		v = v<<4 | uint64(n)
	}
	return v, nil
}

func hex32(v uint32) string { return "0x" + strconv.FormatUint(uint64(v), 16) }
