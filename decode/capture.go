package decode

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// ErrNotCapture is returned (wrapped) by Run when the input is not a pcap or pcapng file.
var ErrNotCapture = errors.New("not a pcap or pcapng capture")

// maxSnaplen bounds the buffer a capture reader may allocate for one frame; it is
// tcpdump's MAXIMUM_SNAPLEN. Files that declare a larger (or zero) snap length are read as
// if they declared this one, so that a corrupt header cannot make the reader allocate
// gigabytes.
const maxSnaplen = 262144

// maxNgBlock bounds one pcapng block (a frame of maxSnaplen plus generous options).
const maxNgBlock = 1 << 20

// Capture file magic numbers (first four bytes).
const (
	pcapMagicMicro      = 0xa1b2c3d4
	pcapMagicNano       = 0xa1b23c4d
	pcapngMagic         = 0x0a0d0d0a
	ngByteOrderMagic    = 0x1a2b3c4d
	ngBlockIDB          = 1
	ngBlockPacket       = 2
	ngBlockSimplePacket = 3
	ngBlockISB          = 5
	ngBlockEPB          = 6
	ngOptionTSResol     = 9
	gzipMagic1          = 0x1f
	gzipMagic2          = 0x8b
)

// linkType is a capture's link-layer header type (LINKTYPE_*, tcpdump.org/linktypes):
// 16 bits in both pcap and pcapng. gopacket's layers.LinkType is 8 bits and pcapgo
// truncates to it (LINUX_SLL2, 276, read as 20), so the capture readers take the link
// type from the file headers themselves.
type linkType uint16

// The link types the decoder reads.
const (
	linkNull      linkType = 0   // BSD loopback: not read
	linkEthernet  linkType = 1   // Ethernet (and Linux lo)
	linkRaw       linkType = 101 // raw IPv4 or IPv6
	linkLinuxSLL  linkType = 113 // Linux cooked capture v1 (tcpdump -i any before libpcap 1.10)
	linkIPv4      linkType = 228
	linkIPv6      linkType = 229
	linkLinuxSLL2 linkType = 276 // Linux cooked capture v2 (tcpdump -i any)
)

// String names the link type as tcpdump does, or by its number.
func (l linkType) String() string {
	switch l {
	case linkNull:
		return "NULL"
	case linkEthernet:
		return "EN10MB"
	case linkRaw:
		return "RAW"
	case linkLinuxSLL:
		return "LINUX_SLL"
	case linkIPv4:
		return "IPV4"
	case linkIPv6:
		return "IPV6"
	case linkLinuxSLL2:
		return "LINUX_SLL2"
	}
	return fmt.Sprintf("LINKTYPE %d", uint16(l))
}

// frameSource yields the frames of a capture with their link types. Data is only valid
// until the next call.
type frameSource interface {
	next() (data []byte, ci gopacket.CaptureInfo, link linkType, err error)
	format() string
}

// openCapture detects the file format by its magic number and returns a frame source.
// A file that is neither pcap nor pcapng yields an error wrapping ErrNotCapture. A
// gzip-compressed capture (pcap or pcapng) is read through gzip.
func openCapture(r io.Reader) (src frameSource, err error) {
	return openCaptureGzip(r, false)
}

func openCaptureGzip(r io.Reader, inGzip bool) (src frameSource, err error) {
	defer func() {
		if p := recover(); p != nil {
			src, err = nil, fmt.Errorf("%w: capture header: malformed (%v)", ErrNotCapture, p)
		}
	}()
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			// Not a short file but one that cannot be read (a directory: EISDIR).
			if inGzip {
				return nil, fmt.Errorf("%w: gzip: %v", ErrNotCapture, err)
			}
			return nil, fmt.Errorf("read: %w", err)
		}
		if len(magic) == 0 {
			return nil, fmt.Errorf("%w: empty file", ErrNotCapture)
		}
		return nil, fmt.Errorf("%w: file is %d bytes long", ErrNotCapture, len(magic))
	}
	le, be := binary.LittleEndian.Uint32(magic), binary.BigEndian.Uint32(magic)
	switch {
	case le == pcapngMagic:
		san := &ngSanitizer{r: br}
		ng, err := pcapgo.NewNgReader(san, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("%w: pcapng: %v", ErrNotCapture, readErr(err))
		}
		return &ngSource{r: ng, san: san}, nil
	case le == pcapMagicMicro || le == pcapMagicNano || be == pcapMagicMicro || be == pcapMagicNano:
		var link linkType
		if hdr, err := br.Peek(24); err == nil {
			// The link type is the low 16 bits of the header's last word (the upper
			// ones may say the frames end in an FCS).
			if le == pcapMagicMicro || le == pcapMagicNano {
				link = linkType(binary.LittleEndian.Uint32(hdr[20:24]))
			} else {
				link = linkType(binary.BigEndian.Uint32(hdr[20:24]))
			}
		}
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: pcap: %v", ErrNotCapture, readErr(err))
		}
		if s := pr.Snaplen(); s == 0 || s > maxSnaplen {
			pr.SetSnaplen(maxSnaplen)
		}
		return &pcapSource{r: pr, link: link}, nil
	case magic[0] == gzipMagic1 && magic[1] == gzipMagic2 && !inGzip:
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrNotCapture, readErr(err))
		}
		return openCaptureGzip(gz, true)
	}
	return nil, fmt.Errorf("%w: unknown magic number %#08x", ErrNotCapture, be)
}

// readErr turns the end-of-file errors of a reader into readable text.
func readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("file truncated")
	}
	return err
}

// pcapSource reads classic pcap files; link is the file's link type as its header says.
type pcapSource struct {
	r    *pcapgo.Reader
	link linkType
}

func (s *pcapSource) next() (data []byte, ci gopacket.CaptureInfo, link linkType, err error) {
	data, ci, err = s.r.ZeroCopyReadPacketData()
	if err == io.EOF && ci.CaptureLength > 0 {
		// The record header was read but none of its data: the file is cut short.
		err = io.ErrUnexpectedEOF
	}
	return data, ci, s.link, err
}

func (s *pcapSource) format() string { return "pcap" }

// ngSource reads pcapng files. pcapgo's pcapng reader indexes option values and divides by
// a resolution taken from the file without checking them; ngSanitizer checks what it can,
// and a recover() here turns anything left into an error for the file instead of a crash.
// The link type pcapgo reports for a packet is the sanitizer's code for its interface's
// link type (see ngSanitizer.links).
type ngSource struct {
	r   *pcapgo.NgReader
	san *ngSanitizer
}

func (s *ngSource) next() (data []byte, ci gopacket.CaptureInfo, link linkType, err error) {
	defer func() {
		if p := recover(); p != nil {
			data, err = nil, fmt.Errorf("pcapng: malformed block (%v)", p)
		}
	}()
	data, ci, err = s.r.ZeroCopyReadPacketData()
	link = linkNull
	if len(ci.AncillaryData) > 0 {
		if code, ok := ci.AncillaryData[0].(layers.LinkType); ok && int(code) < len(s.san.links) {
			link = s.san.links[code]
		}
	}
	return data, ci, link, err
}

func (s *ngSource) format() string { return "pcapng" }

// NgBlockError describes a pcapng block that the decoder refuses to read.
type NgBlockError struct {
	Block  uint32 // block type
	Offset int64  // file offset of the block
	Reason string
}

func (e *NgBlockError) Error() string {
	return fmt.Sprintf("pcapng: block type %#x at offset %d: %s", e.Block, e.Offset, e.Reason)
}

// ngSanitizer sits between the file and pcapgo's pcapng reader. It reads whole blocks,
// checks their framing (lengths, packet lengths inside their block, resolutions that
// pcapgo divides by), and clamps interface snap lengths, so that pcapgo never allocates
// more than one bounded block and never reads one block's bytes as another's.
type ngSanitizer struct {
	r       io.Reader
	pending []byte // validated bytes not yet handed out
	buf     bytes.Buffer
	order   binary.ByteOrder
	snap0   uint32 // snap length (clamped) of the section's first interface
	nIfaces int
	offset  int64
	err     error
	// links are the link types of the file's interfaces, each once. An interface
	// description's 16-bit link type is replaced by its index here before pcapgo reads
	// it, because pcapgo keeps it in 8 bits (layers.LinkType); ngSource maps it back.
	links []linkType
}

func (s *ngSanitizer) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.err = s.readBlock()
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

func (s *ngSanitizer) readBlock() error {
	var hdr [12]byte
	if _, err := io.ReadFull(s.r, hdr[:8]); err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return io.ErrUnexpectedEOF
	}
	typ := binary.LittleEndian.Uint32(hdr[:4])
	if typ == pcapngMagic {
		if _, err := io.ReadFull(s.r, hdr[8:12]); err != nil {
			return io.ErrUnexpectedEOF
		}
		switch {
		case binary.LittleEndian.Uint32(hdr[8:12]) == ngByteOrderMagic:
			s.order = binary.LittleEndian
		case binary.BigEndian.Uint32(hdr[8:12]) == ngByteOrderMagic:
			s.order = binary.BigEndian
		default:
			return &NgBlockError{typ, s.offset, "bad byte-order magic"}
		}
		s.nIfaces, s.snap0 = 0, 0
	} else if s.order == nil {
		return &NgBlockError{typ, s.offset, "file does not start with a section header"}
	} else {
		typ = s.order.Uint32(hdr[:4])
	}
	total := s.order.Uint32(hdr[4:8])
	var minLen uint32
	switch typ {
	case pcapngMagic:
		minLen = 28
	case ngBlockIDB:
		minLen = 20
	case ngBlockEPB, ngBlockPacket:
		minLen = 32
	case ngBlockSimplePacket:
		minLen = 16
	case ngBlockISB:
		minLen = 24
	default:
		minLen = 12
	}
	if total < minLen || total%4 != 0 || total > maxNgBlock {
		return &NgBlockError{typ, s.offset, fmt.Sprintf("block length %d (want a multiple of 4 in %d..%d)", total, minLen, maxNgBlock)}
	}
	s.buf.Reset()
	head := 8
	if typ == pcapngMagic {
		head = 12
	}
	s.buf.Write(hdr[:head])
	if n, _ := io.CopyN(&s.buf, s.r, int64(total)-int64(head)); n != int64(total)-int64(head) {
		return io.ErrUnexpectedEOF
	}
	b := s.buf.Bytes()
	if s.order.Uint32(b[total-4:]) != total {
		return &NgBlockError{typ, s.offset, "trailing block length differs from the leading one"}
	}
	body := b[8 : total-4]
	if err := s.checkBody(typ, body); err != "" {
		return &NgBlockError{typ, s.offset, err}
	}
	s.offset += int64(total)
	s.pending = b
	return nil
}

// checkBody validates (and possibly adjusts) one block's body; it returns a reason
// when the block must be refused.
func (s *ngSanitizer) checkBody(typ uint32, body []byte) string {
	switch typ {
	case ngBlockIDB:
		link := linkType(s.order.Uint16(body[0:2]))
		code := slices.Index(s.links, link)
		if code < 0 {
			if len(s.links) > 0xff {
				return fmt.Sprintf("link type %d: more than 256 link types in one file", uint16(link))
			}
			code = len(s.links)
			s.links = append(s.links, link)
		}
		s.order.PutUint16(body[0:2], uint16(code))
		snap := s.order.Uint32(body[4:8])
		if snap == 0 || snap > maxSnaplen {
			snap = maxSnaplen
			s.order.PutUint32(body[4:8], snap)
		}
		if s.nIfaces == 0 {
			s.snap0 = snap
		}
		s.nIfaces++
		return s.checkOptions(body[8:], true)
	case ngBlockEPB, ngBlockPacket:
		if capLen := s.order.Uint32(body[12:16]); capLen > uint32(len(body)-20) {
			return fmt.Sprintf("captured length %d > %d bytes of packet data", capLen, len(body)-20)
		}
	case ngBlockSimplePacket:
		capLen := s.order.Uint32(body[0:4])
		if s.snap0 != 0 && capLen > s.snap0 {
			capLen = s.snap0
		}
		if capLen > uint32(len(body)-4) {
			return fmt.Sprintf("packet length %d > %d bytes of packet data", capLen, len(body)-4)
		}
	case ngBlockISB:
		return s.checkOptions(body[12:], false)
	}
	return ""
}

// checkOptions walks a block's options: each must fit in the block, and an interface's
// timestamp resolution must be one that fits in 64 bits.
func (s *ngSanitizer) checkOptions(opts []byte, idb bool) string {
	for len(opts) >= 4 {
		code, n := s.order.Uint16(opts[0:2]), int(s.order.Uint16(opts[2:4]))
		if code == 0 {
			return ""
		}
		padded := (n + 3) &^ 3
		if 4+padded > len(opts) {
			return fmt.Sprintf("option %d length %d overruns the block", code, n)
		}
		if idb && code == ngOptionTSResol && n >= 1 {
			v := opts[4]
			if (v&0x80 != 0 && v&0x7f > 63) || (v&0x80 == 0 && v > 19) {
				return fmt.Sprintf("if_tsresol %#x out of range", v)
			}
		}
		opts = opts[4+padded:]
	}
	return ""
}
