package netio

import (
	"encoding/binary"
	"io"
	"time"
	"unicode/utf8"
)

// pcapng blocks and options a CaptureWriter writes (IETF
// draft-ietf-opsawg-pcapng), little-endian.
const (
	ngBlockSHB       = 0x0a0d0d0a // section header
	ngBlockIDB       = 1          // interface description
	ngBlockEPB       = 6          // enhanced packet
	ngByteOrderMagic = 0x1a2b3c4d

	ngOptEnd        = 0 // opt_endofopt
	ngOptComment    = 1 // opt_comment: UTF-8 text, in any block
	ngOptIfName     = 2 // if_name
	ngOptSHBUserApp = 4 // shb_userappl
	ngOptTSResol    = 9 // if_tsresol
	ngMaxOptionLen  = 0xffff
)

// ngWriter writes a pcapng section: one section header (application and
// comments), an interface description per link type on first use
// (nanosecond timestamps), and enhanced packet blocks that may carry
// comments. gopacket's pcapg.NgWriter writes no packet comments and one
// link type per file, hence this one; it is CaptureWriter's pcapng format.
type ngWriter struct {
	w       io.Writer
	snaplen int
	ifaces  map[LinkType]uint32
	buf     []byte
}

// newNgWriter writes the section header block to w.
func newNgWriter(w io.Writer, snaplen int, app string, comments []string) (*ngWriter, error) {
	n := &ngWriter{w: w, snaplen: snaplen, ifaces: map[LinkType]uint32{}}
	b := n.start(ngBlockSHB)
	b = binary.LittleEndian.AppendUint32(b, ngByteOrderMagic)
	b = binary.LittleEndian.AppendUint16(b, 1) // major version
	b = binary.LittleEndian.AppendUint16(b, 0) // minor version
	b = binary.LittleEndian.AppendUint64(b, ^uint64(0))
	b = appendNgOption(b, ngOptSHBUserApp, app)
	for _, c := range comments {
		b = appendNgOption(b, ngOptComment, c)
	}
	return n, n.finish(appendNgOption(b, ngOptEnd, ""))
}

// start begins a block of type typ in n.buf (its length filled in by finish).
func (n *ngWriter) start(typ uint32) []byte {
	b := n.buf[:0]
	b = binary.LittleEndian.AppendUint32(b, typ)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// finish sets the block's total length, at its start and end, and writes it.
func (n *ngWriter) finish(b []byte) error {
	total := uint32(len(b) + 4)
	binary.LittleEndian.PutUint32(b[4:8], total)
	b = binary.LittleEndian.AppendUint32(b, total)
	n.buf = b
	_, err := n.w.Write(b)
	return err
}

// appendNgOption appends one option (code, length, value padded to 4 octets).
// A value longer than an option holds is cut at a UTF-8 character boundary.
// ngOptEnd ends the list.
func appendNgOption(b []byte, code uint16, v string) []byte {
	if code == ngOptEnd {
		return binary.LittleEndian.AppendUint32(b, 0)
	}
	if len(v) > ngMaxOptionLen {
		v = v[:ngMaxOptionLen]
		for len(v) > 0 && !utf8.ValidString(v) {
			v = v[:len(v)-1]
		}
	}
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// iface returns the interface of link type link, describing it first if it
// is new.
func (n *ngWriter) iface(link LinkType) (uint32, error) {
	if id, ok := n.ifaces[link]; ok {
		return id, nil
	}
	id := uint32(len(n.ifaces))
	n.ifaces[link] = id
	b := n.start(ngBlockIDB)
	b = binary.LittleEndian.AppendUint16(b, uint16(link))
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(n.snaplen))
	b = binary.LittleEndian.AppendUint16(b, ngOptTSResol)
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = append(b, 9, 0, 0, 0) // 10^-9 s
	b = appendNgOption(b, ngOptIfName, "softrdma")
	return id, n.finish(appendNgOption(b, ngOptEnd, ""))
}

// writePacket writes data (wireLen bytes on the wire) as an enhanced packet
// block with its comments.
func (n *ngWriter) writePacket(ts time.Time, link LinkType, data []byte, wireLen int, comments []string) error {
	id, err := n.iface(link)
	if err != nil {
		return err
	}
	t := uint64(ts.UnixNano())
	b := n.start(ngBlockEPB)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint32(b, uint32(t>>32))
	b = binary.LittleEndian.AppendUint32(b, uint32(t))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, uint32(max(wireLen, len(data))))
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	if len(comments) > 0 {
		for _, c := range comments {
			b = appendNgOption(b, ngOptComment, c)
		}
		b = appendNgOption(b, ngOptEnd, "")
	}
	return n.finish(b)
}
