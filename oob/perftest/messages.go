// Package perftest speaks the out-of-band exchange of perftest 4.5-0.17 (ib_write_bw,
// ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat,
// ib_atomic_lat), so that softrdma's perf command can run against the real tools.
//
// perftest's two sides exchange, over one TCP connection to port 18515 (or, with -R or
// -z, as RC SENDs on a QP connected by rdma_cm), a fixed series of messages: versions,
// two system-data integers, the MTU, the QP "keys" (several times: some of the exchanges
// are barriers), the bandwidth report after the test, and "done". Every exchange is
// symmetric: the client sends its message and then receives the server's; the server
// receives first and then sends (perftest_communication.c, ctx_xchg_data_ethernet and
// ctx_hand_shake).
//
// The message types here marshal to and from exactly the bytes perftest writes, checked
// against the captures in testdata/captures; Session runs single exchanges; Plan lists
// the exchanges of each tool in perftest's order and Run executes a plan over a Carrier,
// calling Hooks where the caller creates, connects and exercises its QPs. README.md in
// the parent directory has the byte layouts and sequence diagrams.
package perftest

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"

	"github.com/softrdma/softrdma/oob"
)

// DefaultPort is perftest's default TCP port (-p), also the rdma_cm port with -R.
const DefaultPort = 18515

// Message sizes on the wire.
const (
	// VersionSize is the size of the version message (MAX_VERSION).
	VersionSize = 16
	// SysDataSize is the size of the two system-data messages together (two ints).
	SysDataSize = 8
	// MTUSize is the size of the MTU message (sizeof(char[2]) for peers >= 5.31).
	MTUSize = 2
	// KeysSize is the size of the keys message without GID (KEY_MSG_SIZE).
	KeysSize = 59
	// KeysGIDSize is the size of the keys message with GID (KEY_MSG_SIZE_GID).
	KeysGIDSize = 108
	// DestBinarySize is sizeof(struct pingpong_dest) on x86_64, the keys message over
	// rdma_cm.
	DestBinarySize = 56
	// ReportFieldSize is the size of each bandwidth-report message.
	ReportFieldSize = 8
	// ReportSize is the size of a report's messages together, ReportPerPortSize with
	// the four per-port fields of dual-port runs.
	ReportSize        = 5 * ReportFieldSize
	ReportPerPortSize = 9 * ReportFieldSize
)

// Done is the message both sides write at the end of the TCP exchange: "done" and its
// NUL. It is not sent over rdma_cm.
const Done = "done\x00"

// MinPeerVersion is the oldest peer version perftest 4.5 works with
// (check_version_compatibility exits below it).
const MinPeerVersion = 5.70

// Version is the version message: perftest's version string (configure.ac's AC_INIT
// version, "6.06" for 4.5-0.17) NUL-padded to 16 bytes.
type Version [VersionSize]byte

// DefaultVersion is the version perftest 4.5-0.17 sends. Advertising it also keeps newer
// perftests (6.28 and later) from sending their parameter negotiation message, which
// they only do to peers of 6.28 or later.
var DefaultVersion = MakeVersion("6.06")

// MakeVersion returns the version message for s, truncated to 15 bytes.
func MakeVersion(s string) Version {
	var v Version
	copy(v[:VersionSize-1], s)
	return v
}

// String returns the version string: the bytes up to the first NUL.
func (v Version) String() string {
	if i := bytes.IndexByte(v[:], 0); i >= 0 {
		return string(v[:i])
	}
	return string(v[:])
}

// Number returns the version as perftest compares it, atof(version): the leading
// decimal number, 0 if there is none.
func (v Version) Number() float64 {
	s := v[:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return 0
	}
	f, err := strconv.ParseFloat(string(s[start:i]), 64)
	if err != nil {
		return 0
	}
	return f
}

// AppendBinary appends the 16-byte message.
func (v *Version) AppendBinary(b []byte) ([]byte, error) { return append(b, v[:]...), nil }

// MarshalBinary returns the 16-byte message.
func (v *Version) MarshalBinary() ([]byte, error) { return v.AppendBinary(nil) }

// UnmarshalBinary takes a 16-byte message as it is, bytes after the NUL included.
func (v *Version) UnmarshalBinary(b []byte) error {
	if len(b) != VersionSize {
		return lengthError("perftest version", len(b), VersionSize)
	}
	copy(v[:], b)
	return nil
}

// SysData is what check_sys_data exchanges, as two 4-byte big-endian messages: the
// cycle buffer size (the page size by default, --cycle_buffer) and the cache line size.
// Each side then uses the larger of each.
type SysData struct {
	CycleBuffer   int32
	CacheLineSize int32
}

// DefaultSysData is what perftest sends on x86_64 Linux: 4 KiB pages, 64-byte lines.
var DefaultSysData = SysData{CycleBuffer: 4096, CacheLineSize: 64}

// Max returns the field-wise maximum of s and remote, which both sides adopt.
func (s SysData) Max(remote SysData) SysData {
	return SysData{CycleBuffer: max(s.CycleBuffer, remote.CycleBuffer), CacheLineSize: max(s.CacheLineSize, remote.CacheLineSize)}
}

// AppendBinary appends the two messages (8 bytes).
func (s *SysData) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, uint32(s.CycleBuffer))
	return binary.BigEndian.AppendUint32(b, uint32(s.CacheLineSize)), nil
}

// MarshalBinary returns the two messages (8 bytes).
func (s *SysData) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// UnmarshalBinary parses the two messages (8 bytes).
func (s *SysData) UnmarshalBinary(b []byte) error {
	if len(b) != SysDataSize {
		return lengthError("perftest sys data", len(b), SysDataSize)
	}
	s.CycleBuffer = int32(binary.BigEndian.Uint32(b))
	s.CacheLineSize = int32(binary.BigEndian.Uint32(b[4:]))
	return nil
}

// MTU is an IB path MTU as the verbs enum ibv_mtu numbers it, which is what perftest
// sends (check_mtu: sprintf("%d", curr_mtu) in 2 bytes).
type MTU uint8

// The ibv_mtu values.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// MTUFromBytes returns the MTU of n bytes (256, 512, ..., 4096).
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// Valid reports whether m is one of the five MTUs (valid_mtu_size).
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes returns the MTU in bytes, 0 if m is not valid.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// String returns "1024" for MTU1024, "mtu(N)" for invalid values.
func (m MTU) String() string {
	if !m.Valid() {
		return "mtu(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}

// Negotiate returns the MTU both sides use: remote if it is valid and smaller than m,
// else m (check_mtu).
func (m MTU) Negotiate(remote MTU) MTU {
	if remote.Valid() && m > remote {
		return remote
	}
	return m
}

// AppendBinary appends the 2-byte message: the decimal enum value and a NUL ("3\x00"
// for 1024), or two digits without NUL for a two-digit value, as perftest's sprintf
// into char[4] followed by a 2-byte write gives.
func (m *MTU) AppendBinary(b []byte) ([]byte, error) {
	switch v := *m; {
	case v < 10:
		return append(b, '0'+byte(v), 0), nil
	case v < 100:
		return append(b, '0'+byte(v/10), '0'+byte(v%10)), nil
	default:
		return b, &oob.Error{Message: "perftest mtu", Field: "value", Value: strconv.Itoa(int(v)), Reason: "has 3 digits, the message 2 bytes", Err: oob.ErrRange}
	}
}

// MarshalBinary returns the 2-byte message.
func (m *MTU) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

// UnmarshalBinary parses the 2-byte message: one digit and a NUL, or two digits (not
// starting with 0, which %d never writes). An
// MTU that is not Valid is returned as it is: perftest ignores it when negotiating.
func (m *MTU) UnmarshalBinary(b []byte) error {
	if len(b) != MTUSize {
		return lengthError("perftest mtu", len(b), MTUSize)
	}
	if b[0] < '0' || b[0] > '9' || (b[1] != 0 && (b[0] == '0' || b[1] < '0' || b[1] > '9')) {
		return &oob.Error{Message: "perftest mtu", Field: "value", Value: strconv.Quote(string(b)), Reason: "want a decimal number", Err: oob.ErrSyntax}
	}
	v := b[0] - '0'
	if b[1] != 0 {
		v = v*10 + b[1] - '0'
	}
	*m = MTU(v)
	return nil
}

// BWReport is a bandwidth test's result as xchg_bw_reports exchanges it: each field is
// its own 8-byte big-endian message, in the order of the struct (size, iters, bw_peak,
// bw_avg, msgRate_avg, then with PerPort bw_avg_p1, msgRate_avg_p1, bw_avg_p2,
// msgRate_avg_p2). Floats travel as their IEEE 754 bits, so every value, NaNs included,
// re-marshals to the same bytes.
//
// The half-duplex server of ib_write_bw, ib_read_bw and ib_atomic_bw sends a report it
// never filled in: uninitialised stack memory (the captures show pointers there).
type BWReport struct {
	// Size is the message size in bytes.
	Size uint64
	// Iters is the number of messages measured (iterations times QPs).
	Iters uint64
	// BWPeak and BWAvg are in MiB/s (perftest's "MB/sec", 2^20 bytes per second), or
	// in Gb/s when the sender ran with --report_gbits.
	BWPeak, BWAvg float64
	// MsgRateAvg is in millions of messages per second.
	MsgRateAvg float64
	// PerPort says whether the four per-port fields travel (report_per_port, dual-port
	// runs).
	PerPort bool
	// BWAvgP1, MsgRateAvgP1, BWAvgP2 and MsgRateAvgP2 are the per-port averages of
	// ports 1 and 2 (sent in that order: bw p1, rate p1, bw p2, rate p2).
	BWAvgP1, MsgRateAvgP1, BWAvgP2, MsgRateAvgP2 float64
}

// AppendBinary appends the report's messages: 40 bytes, 72 with PerPort.
func (r *BWReport) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, r.Size)
	b = binary.BigEndian.AppendUint64(b, r.Iters)
	for _, f := range [...]float64{r.BWPeak, r.BWAvg, r.MsgRateAvg} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	}
	if r.PerPort {
		for _, f := range [...]float64{r.BWAvgP1, r.MsgRateAvgP1, r.BWAvgP2, r.MsgRateAvgP2} {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
		}
	}
	return b, nil
}

// MarshalBinary returns the report's messages.
func (r *BWReport) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

// UnmarshalBinary parses a report's messages: 40 bytes, or 72 (PerPort).
func (r *BWReport) UnmarshalBinary(b []byte) error {
	if len(b) != ReportSize && len(b) != ReportPerPortSize {
		e := lengthError("perftest report", len(b), ReportSize)
		e.Reason = "want 40 or 72"
		return e
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(b[i*ReportFieldSize:]) }
	f := func(i int) float64 { return math.Float64frombits(u(i)) }
	*r = BWReport{Size: u(0), Iters: u(1), BWPeak: f(2), BWAvg: f(3), MsgRateAvg: f(4)}
	if len(b) == ReportPerPortSize {
		r.PerPort = true
		r.BWAvgP1, r.MsgRateAvgP1, r.BWAvgP2, r.MsgRateAvgP2 = f(5), f(6), f(7), f(8)
	}
	return nil
}

func lengthError(msg string, got, want int) *oob.Error {
	kind := oob.ErrTruncated
	if got > want {
		kind = oob.ErrSyntax
	}
	return &oob.Error{Message: msg, Field: "length", Value: strconv.Itoa(got), Reason: "want " + strconv.Itoa(want), Err: kind}
}
