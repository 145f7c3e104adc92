package decode

import (
	"encoding/binary"
	"io"
	"unicode/utf8"

	"github.com/google/gopacket"
)

// pcapng block types and options written by ngWriter (pcapng, IETF draft-ietf-opsawg-pcapng).
const (
	ngOptEnd        = 0 // opt_endofopt
	ngOptComment    = 1 // opt_comment: UTF-8 text, in any block
	ngOptSHBUserApp = 4 // shb_userappl
	ngMaxOptionLen  = 0xffff
)

// ngWriter writes a pcapng file: one section header, an interface description per link
// type (nanosecond timestamps), and enhanced packet blocks that may carry comments.
// gopacket's pcapgo.NgWriter (v1.1.19) writes no packet comments, hence this one.
type ngWriter struct {
	w      io.Writer
	ifaces map[linkType]uint32
	buf    []byte
	err    error
}

// newNgWriter writes the section header block, with the application's name and the
// comments given (one opt_comment each), and returns the writer.
func newNgWriter(w io.Writer, app string, comments []string) *ngWriter {
	n := &ngWriter{w: w, ifaces: map[linkType]uint32{}}
	b := n.start(0x0a0d0d0a)
	b = binary.LittleEndian.AppendUint32(b, ngByteOrderMagic)
	b = binary.LittleEndian.AppendUint16(b, 1) // major version
	b = binary.LittleEndian.AppendUint16(b, 0) // minor version
	b = binary.LittleEndian.AppendUint64(b, ^uint64(0))
	b = appendNgOption(b, ngOptSHBUserApp, app)
	for _, c := range comments {
		b = appendNgOption(b, ngOptComment, c)
	}
	n.finish(appendNgOption(b, ngOptEnd, ""))
	return n
}

// start begins a block of type typ in n.buf (its length filled in by finish).
func (n *ngWriter) start(typ uint32) []byte {
	b := n.buf[:0]
	b = binary.LittleEndian.AppendUint32(b, typ)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// finish sets the block's total length, at its start and end, and writes it.
func (n *ngWriter) finish(b []byte) {
	total := uint32(len(b) + 4)
	binary.LittleEndian.PutUint32(b[4:8], total)
	b = binary.LittleEndian.AppendUint32(b, total)
	n.buf = b
	if n.err == nil {
		_, n.err = n.w.Write(b)
	}
}

// appendNgOption appends one option (code, length, value padded to 4 octets). A value
// longer than an option holds is cut at a UTF-8 character boundary. ngOptEnd ends the
// list.
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

// iface returns the interface of link type link, describing it first if it is new.
func (n *ngWriter) iface(link linkType) uint32 {
	if id, ok := n.ifaces[link]; ok {
		return id
	}
	id := uint32(len(n.ifaces))
	n.ifaces[link] = id
	b := n.start(ngBlockIDB)
	b = binary.LittleEndian.AppendUint16(b, uint16(link))
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, maxSnaplen)
	b = binary.LittleEndian.AppendUint16(b, ngOptionTSResol)
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = append(b, 9, 0, 0, 0) // 10^-9 s: the input's timestamps, micro or nano, kept exactly
	n.finish(appendNgOption(b, ngOptEnd, ""))
	return id
}

// writePacket writes one frame as an enhanced packet block with its comments.
func (n *ngWriter) writePacket(link linkType, ci gopacket.CaptureInfo, data []byte, comments []string) error {
	id := n.iface(link)
	ts := uint64(ci.Timestamp.UnixNano())
	b := n.start(ngBlockEPB)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint32(b, uint32(ts>>32))
	b = binary.LittleEndian.AppendUint32(b, uint32(ts))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, uint32(max(ci.Length, len(data))))
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
	n.finish(b)
	return n.err
}
