package perftest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/oob"
)

// Dest is perftest's struct pingpong_dest: what one side tells the other about one of
// its QPs in every handshake (ctx_hand_shake). Over TCP it travels as text, the keys
// message (AppendKeys); over rdma_cm as the C struct itself (AppendBinary).
type Dest struct {
	// LID is the port's LID (0 on RoCE and iWARP); 16 bits in the keys message.
	LID uint32
	// OutReads is the number of outstanding RDMA READs/atomics the QP allows
	// (max_qp_rd_atom-based for read and atomic tests, 1 otherwise); 16 bits in the
	// keys message.
	OutReads uint32
	// QPN and PSN are the QP number and its first PSN (24 bits each).
	QPN, PSN uint32
	// RKey and VAddr describe the buffer the peer may access: the MR's rkey and the
	// address of this QP's part of it.
	RKey  uint32
	VAddr uint64
	// GID is the source GID, all zeros without one.
	GID [16]byte
	// SRQN is the SRQ number (XRC and DC tests), 0 otherwise.
	SRQN uint32
	// GIDIndex is the GID index in use, -1 for none. It is on the wire only in the
	// binary form; over TCP each side picks the keys format by its own GID index.
	GIDIndex int32
	// Padding is the binary form's 4 alignment bytes before VAddr. perftest copies its
	// dest into an uninitialised stack struct, so they hold whatever was there (the
	// captures show 00000000 and 05560000); they are kept so that a decoded message
	// re-marshals byte for byte. Set them to zero when sending.
	Padding [4]byte
}

// String formats d for people, e.g. "LID 0x0000 QPN 0x000014 PSN 0x736e15 OUT 0x0001
// RKey 0x000005b5 VAddr 0x0000564aed094000 SRQN 0x0 GID ::ffff:10.77.0.22".
func (d Dest) String() string {
	return fmt.Sprintf("LID 0x%04x QPN 0x%06x PSN 0x%06x OUT 0x%04x RKey 0x%08x VAddr 0x%016x SRQN 0x%x GID %s",
		d.LID, d.QPN, d.PSN, d.OutReads, d.RKey, d.VAddr, d.SRQN, netip.AddrFrom16(d.GID))
}

// The keys message (KEY_PRINT_FMT and KEY_PRINT_FMT_GID in perftest_communication.h):
//
//	"%04x:%04x:%06x:%06x:%08x:%016llx:%08x"                         + NUL = 59 bytes
//	"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:"    + NUL = 108 bytes
//
// lid, out_reads, qpn, psn, rkey, vaddr, [gid bytes in order,] srqn.
type keyField uint8

const (
	kLID keyField = iota
	kOutReads
	kQPN
	kPSN
	kRKey
	kVAddr
	kGID0 // kGID0+i: GID byte i
	kSRQN = kGID0 + 16
)

var keyFieldNames = [...]string{"lid", "out_reads", "qpn", "psn", "rkey", "vaddr",
	"gid[0]", "gid[1]", "gid[2]", "gid[3]", "gid[4]", "gid[5]", "gid[6]", "gid[7]",
	"gid[8]", "gid[9]", "gid[10]", "gid[11]", "gid[12]", "gid[13]", "gid[14]", "gid[15]", "srqn"}

func (f keyField) digits() int {
	switch {
	case f == kLID || f == kOutReads:
		return 4
	case f == kQPN || f == kPSN:
		return 6
	case f == kRKey || f == kSRQN:
		return 8
	case f == kVAddr:
		return 16
	}
	return 2 // GID bytes
}

// keyFields lists the fields of a keys message in order.
func keyFields(withGID bool) []keyField {
	if withGID {
		return allKeyFields[:]
	}
	return noGIDKeyFields[:]
}

var (
	allKeyFields   = [...]keyField{kLID, kOutReads, kQPN, kPSN, kRKey, kVAddr, kGID0, kGID0 + 1, kGID0 + 2, kGID0 + 3, kGID0 + 4, kGID0 + 5, kGID0 + 6, kGID0 + 7, kGID0 + 8, kGID0 + 9, kGID0 + 10, kGID0 + 11, kGID0 + 12, kGID0 + 13, kGID0 + 14, kGID0 + 15, kSRQN}
	noGIDKeyFields = [...]keyField{kLID, kOutReads, kQPN, kPSN, kRKey, kVAddr, kSRQN}
)

// KeysLen returns the size of the keys message: KeysGIDSize or KeysSize.
func KeysLen(withGID bool) int {
	if withGID {
		return KeysGIDSize
	}
	return KeysSize
}

func (d *Dest) keyValue(f keyField) uint64 {
	switch f {
	case kLID:
		return uint64(d.LID)
	case kOutReads:
		return uint64(d.OutReads)
	case kQPN:
		return uint64(d.QPN)
	case kPSN:
		return uint64(d.PSN)
	case kRKey:
		return uint64(d.RKey)
	case kVAddr:
		return d.VAddr
	case kSRQN:
		return uint64(d.SRQN)
	}
	return uint64(d.GID[f-kGID0])
}

func (d *Dest) setKeyValue(f keyField, v uint64) {
	switch f {
	case kLID:
		d.LID = uint32(v)
	case kOutReads:
		d.OutReads = uint32(v)
	case kQPN:
		d.QPN = uint32(v)
	case kPSN:
		d.PSN = uint32(v)
	case kRKey:
		d.RKey = uint32(v)
	case kVAddr:
		d.VAddr = v
	case kSRQN:
		d.SRQN = uint32(v)
	default:
		d.GID[f-kGID0] = byte(v)
	}
}

const keysName = "perftest keys"

// AppendKeys appends the keys message for d (with or without the GID, as the sender's
// GID index says). It fails if a value has more digits than its field.
func (d *Dest) AppendKeys(b []byte, withGID bool) ([]byte, error) {
	const hexDigits = "0123456789abcdef"
	for i, f := range keyFields(withGID) {
		v, n := d.keyValue(f), f.digits()
		if n < 16 && v>>(4*uint(n)) != 0 {
			return b, &oob.Error{Message: keysName, Field: keyFieldNames[f], Value: "0x" + strconv.FormatUint(v, 16),
				Reason: "does not fit " + strconv.Itoa(n) + " hex digits", Err: oob.ErrRange}
		}
		if i > 0 {
			b = append(b, ':')
		}
		for j := n - 1; j >= 0; j-- {
			b = append(b, hexDigits[(v>>(4*uint(j)))&0xf])
		}
	}
	if withGID {
		b = append(b, ':')
	}
	return append(b, 0), nil
}

// UnmarshalKeys parses a keys message: exactly the layout perftest prints (fixed widths,
// ':' separators, the trailing ':' of the GID format, the NUL), either case of hex.
// d.GIDIndex and d.Padding are left as they are (they are not in the message). It does
// not allocate unless it fails.
func (d *Dest) UnmarshalKeys(b []byte, withGID bool) error {
	if want := KeysLen(withGID); len(b) != want {
		return lengthError(keysName, len(b), want)
	}
	gidIndex, pad := d.GIDIndex, d.Padding
	*d = Dest{GIDIndex: gidIndex, Padding: pad}
	pos := 0
	for i, f := range keyFields(withGID) {
		if i > 0 {
			if err := keysSep(b, pos); err != nil {
				return err
			}
			pos++
		}
		n := f.digits()
		var v uint64
		for _, c := range b[pos : pos+n] {
			x, ok := unhex(c)
			if !ok {
				return &oob.Error{Message: keysName, Field: keyFieldNames[f], Value: strconv.Quote(string(b[pos : pos+n])),
					Reason: "not " + strconv.Itoa(n) + " hex digits", Err: oob.ErrSyntax}
			}
			v = v<<4 | uint64(x)
		}
		d.setKeyValue(f, v)
		pos += n
	}
	if withGID {
		if err := keysSep(b, pos); err != nil {
			return err
		}
		pos++
	}
	if b[pos] != 0 {
		return &oob.Error{Message: keysName, Field: "terminator", Value: strconv.Quote(string(b[pos:])), Reason: "want NUL", Err: oob.ErrSyntax}
	}
	return nil
}

func keysSep(b []byte, pos int) error {
	if b[pos] != ':' {
		return &oob.Error{Message: keysName, Field: "separator", Value: strconv.Quote(string(b[pos : pos+1])),
			Reason: "at offset " + strconv.Itoa(pos) + ", want ':'", Err: oob.ErrSyntax}
	}
	return nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// The binary form: struct pingpong_dest as gcc lays it out on x86_64, every integer
// converted to big endian (htobe32/htobe64 in rdma_write_keys, HAVE_ENDIAN builds):
//
//	0 lid  4 out_reads  8 qpn  12 psn  16 rkey  20 (padding)  24 vaddr (8)
//	32 gid (16)  48 srqn  52 gid_index  -> 56 bytes
const (
	binLID      = 0
	binOutReads = 4
	binQPN      = 8
	binPSN      = 12
	binRKey     = 16
	binPad      = 20
	binVAddr    = 24
	binGID      = 32
	binSRQN     = 48
	binGIDIndex = 52
)

// AppendBinary appends the 56-byte binary form sent over rdma_cm.
func (d *Dest) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, d.LID)
	b = binary.BigEndian.AppendUint32(b, d.OutReads)
	b = binary.BigEndian.AppendUint32(b, d.QPN)
	b = binary.BigEndian.AppendUint32(b, d.PSN)
	b = binary.BigEndian.AppendUint32(b, d.RKey)
	b = append(b, d.Padding[:]...)
	b = binary.BigEndian.AppendUint64(b, d.VAddr)
	b = append(b, d.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.SRQN)
	return binary.BigEndian.AppendUint32(b, uint32(d.GIDIndex)), nil
}

// MarshalBinary returns the 56-byte binary form.
func (d *Dest) MarshalBinary() ([]byte, error) {
	return d.AppendBinary(make([]byte, 0, DestBinarySize))
}

// UnmarshalBinary parses the 56-byte binary form. perftest's reader (rdma_read_keys)
// takes lid, out_reads, qpn, psn, rkey, vaddr and gid from it; srqn, gid_index and the
// padding are decoded too.
func (d *Dest) UnmarshalBinary(b []byte) error {
	if len(b) != DestBinarySize {
		return lengthError("perftest dest", len(b), DestBinarySize)
	}
	u := func(off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
	*d = Dest{LID: u(binLID), OutReads: u(binOutReads), QPN: u(binQPN), PSN: u(binPSN), RKey: u(binRKey),
		VAddr: binary.BigEndian.Uint64(b[binVAddr:]), SRQN: u(binSRQN), GIDIndex: int32(u(binGIDIndex))}
	copy(d.Padding[:], b[binPad:binVAddr])
	copy(d.GID[:], b[binGID:binSRQN])
	return nil
}

// GIDCompatible reports whether two GIDs are of the same kind, both IPv4-mapped
// (::ffff:a.b.c.d, or the ff0e::ffff:a.b.c.d multicast form) or both not, which perftest
// requires before connecting (ctx_check_gid_compatibility).
func GIDCompatible(a, b [16]byte) bool { return v4Mapped(a) == v4Mapped(b) }

func v4Mapped(g [16]byte) bool {
	w := func(i int) uint32 { return binary.BigEndian.Uint32(g[4*i:]) }
	return w(0)|w(1)|(w(2)^0xffff) == 0 || (w(0) == 0xff0e0000 && w(1)|(w(2)^0xffff) == 0)
}

func netipString(g [16]byte) string { return netip.AddrFrom16(g).String() }
