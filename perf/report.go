package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/oob/perftest"
)

// The text below reproduces what perftest 4.5-0.17 prints (perftest_parameters.h's
// RESULT_* and REPORT_* formats, ctx_print_test_info, ctx_print_pingpong_data),
// checked against testdata/captures/logs/rxe-*.log.

// resultLine is RESULT_LINE.
const resultLine = "---------------------------------------------------------------------------------------\n"

// Table headers (RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT, RESULT_FMT_LAT_DUR),
// each followed by RESULT_EXT ("\n").
const (
	bwHeader      = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	bwHeaderG     = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	latHeader     = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	latDurHeader  = " #bytes        #iterations       t_avg[usec]    tps average"
	waitingBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
)

// tableHeader is the line and the column titles above the results.
func tableHeader(p *params) string {
	h := latHeader
	switch {
	case p.bw:
		h = bwTableHeader(p.gbits)
	case p.durationMode():
		h = latDurHeader
	}
	return resultLine + h + "\n"
}

// bwTableHeader is RESULT_FMT or, with --report_gbits, RESULT_FMT_G.
func bwTableHeader(gbits bool) string {
	if gbits {
		return bwHeaderG
	}
	return bwHeader
}

// formatFactor is print_report_bw's format_factor: bytes per MB (2^20) or
// per Gb (1.25e8).
func formatFactor(gbits bool) float64 {
	if gbits {
		return 125000000
	}
	return 0x100000
}

// testInfo is what ctx_print_test_info prints.
type testInfo struct {
	p        *params
	device   string
	mtu      int // the MTU both sides use, in bytes
	gidIndex int
	outReads int
	iwarp    bool // Transport type IW
}

// title is the test's title line: e.g. "RDMA_Write BW Test",
// "Atomic FETCH_AND_ADD BW Test", "Send Latency Test".
func title(p *params) string {
	var b strings.Builder
	b.WriteString(verbNames[p.verb] + " ")
	if p.verb == verbAtomic {
		b.WriteString(atomicTypes[p.atomic] + " ")
	}
	if p.bw {
		if p.duplex {
			b.WriteString("Bidirectional ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test")
	return b.String()
}

// transport is transport_str's: IB for RoCE, IW for iWARP.
func (ti *testInfo) transport() string {
	if ti.iwarp {
		return "IW"
	}
	return "IB"
}

func (ti *testInfo) write(w io.Writer) {
	p := ti.p
	onOff := func(b bool) string {
		if b {
			return "ON"
		}
		return "OFF"
	}
	var b strings.Builder
	b.WriteString(resultLine)
	b.WriteString("                    " + title(p) + "\n")
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", ti.device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", p.qps, ti.transport())
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", p.conn, "OFF")
	// ib_write_lat alone turns PCIe relaxed ordering off (write_lat.c).
	fmt.Fprintf(&b, " PCIe relax order: %s\n", onOff(p.test != perftest.WriteLat))
	b.WriteString(" ibv_wr* API     : OFF\n")
	if !p.server || p.duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", p.txDepth)
	}
	if p.verb == verbSend && (p.server || p.duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", p.rxDepth)
	}
	if p.bw {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", p.cqMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", ti.mtu)
	b.WriteString(" Link type       : Ethernet\n")
	fmt.Fprintf(&b, " GID index       : %d\n", ti.gidIndex)
	if p.verb != verbRead && p.verb != verbAtomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", p.inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", ti.outReads)
	}
	if ti.p.rdmaCM {
		b.WriteString(" rdma_cm QPs\t : ON\n")
	} else {
		b.WriteString(" rdma_cm QPs\t : OFF\n")
	}
	if ti.p.useCM {
		b.WriteString(" Data ex. method : rdma_cm\n")
	} else {
		b.WriteString(" Data ex. method : Ethernet\n")
	}
	b.WriteString(resultLine)
	io.WriteString(w, b.String())
}

// cHex formats v as C's printf("%#0<width>x") does: no 0x prefix for zero,
// and the prefix counted in the width.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	digits := strconv.FormatUint(v, 16)
	if pad := width - 2 - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	return "0x" + digits
}

// destLines are ctx_print_pingpong_data's lines for one QP: BASIC_ADDR_FMT,
// READ_FMT for read tests, RDMA_FMT for read and write tests, then the GID in
// decimal (PERF_GID_FMT).
func destLines(side string, d perftest.Dest, verb verb) string {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	if verb == verbRead {
		fmt.Fprintf(&b, " OUT %s", cHex(uint64(d.OutReads), 4))
	}
	if verb == verbRead || verb == verbWrite {
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	b.WriteString("\n GID: ")
	for i, g := range d.GID {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02d", g)
	}
	b.WriteByte('\n')
	return b.String()
}

// bwLine is one row of a bandwidth table (REPORT_FMT, or REPORT_FMT_EXT when
// a Gb/s average is below 0.1) with its newline.
func bwLine(r perftest.BWReport, gbits bool) string {
	if r.BWAvg < 0.1 && gbits {
		return fmt.Sprintf(" %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRateAvg)
	}
	return fmt.Sprintf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRateAvg)
}

// sum adds the peer's report to ours, as print_full_bw_report does for -b.
func sum(local, remote perftest.BWReport) perftest.BWReport {
	s := local
	s.BWPeak += remote.BWPeak
	s.BWAvg += remote.BWAvg
	s.MsgRateAvg += remote.MsgRateAvg
	return s
}

// bwSamples are a bandwidth run's timestamps, in nanoseconds of the
// monotonic clock (perftest's cycles, with 1e9 cycles per second).
type bwSamples struct {
	size       uint64
	iters      uint64  // messages measured: iterations × QPs, or those completed during a -D sample
	cqMod      uint64  // completions are counted cqMod at a time
	noPeak     bool    // tposted and tcompleted hold only [0]
	tposted    []int64 // when WR i was posted
	tcompleted []int64 // when the completion count reached i+1
}

// report computes the report as print_report_bw does: the average over the
// whole run, and the peak as the best rate over any window from a post to a
// later counted completion.
func (s *bwSamples) report(gbits bool) perftest.BWReport {
	ff := formatFactor(gbits)
	const cyclesPerSec = 1e9
	n := s.iters
	r := perftest.BWReport{Size: s.size, Iters: n}
	if n == 0 || len(s.tposted) == 0 || len(s.tcompleted) == 0 {
		return r
	}
	loc := uint64(0)
	if !s.noPeak {
		loc = n - 1
	}
	sum := float64(s.tcompleted[loc] - s.tposted[0])
	if sum <= 0 {
		sum = 1
	}
	r.BWAvg = float64(s.size) * float64(n) * cyclesPerSec / (sum * ff)
	r.MsgRateAvg = float64(n) * cyclesPerSec / (sum * 1e6)
	if s.noPeak {
		return r
	}
	// perftest's cycles are unsigned: a difference with an unset (zero)
	// completion time wraps to a huge value and never wins.
	cq := max(s.cqMod, 1)
	opt := uint64(s.tcompleted[0] - s.tposted[0])
	if s.tcompleted[0] == 0 {
		opt = math.MaxUint64
	}
	consider := func(i, j uint64) {
		if s.tcompleted[j] == 0 {
			return // never set: not a completion count the run reached
		}
		if t := uint64(s.tcompleted[j]-s.tposted[i]) / (j - i + 1); t < opt {
			opt = t
		}
	}
	for i := uint64(0); i < n; i++ {
		for j := (i+1+cq-1)/cq*cq - 1; j < n; j += cq {
			consider(i, j)
		}
		if n%cq != 0 {
			consider(i, n-1)
		}
	}
	if opt == 0 {
		opt = 1
	}
	// peak_up / peak_down in perftest's integer cycles.
	r.BWPeak = float64(s.size*uint64(cyclesPerSec)) / (float64(opt) * ff)
	return r
}

// latStats is one row of a latency table, in microseconds.
type latStats struct {
	Size     uint64  `json:"bytes"`
	Iters    uint64  `json:"iterations"`
	TMin     float64 `json:"t_min_usec"`
	TMax     float64 `json:"t_max_usec"`
	TTypical float64 `json:"t_typical_usec"`
	TAvg     float64 `json:"t_avg_usec"`
	TStdev   float64 `json:"t_stdev_usec"`
	P99      float64 `json:"p99_usec"`
	P999     float64 `json:"p99_9_usec"`
	// Duration runs (-D) report only the average and transactions per second.
	TPS float64 `json:"tps,omitempty"`
}

// latency computes print_report_lat's statistics from the post times of
// iters iterations: the iters-1 intervals between posts, sorted, the two
// largest dropped; halved for round trips (WRITE and SEND ping-pongs) and not
// for READs. The standard deviation keeps perftest's truncation of each
// deviation to an int.
func latency(size uint64, tposted []int64, rttFactor int) latStats {
	st := latStats{Size: size, Iters: uint64(len(tposted))}
	if len(tposted) < minIters {
		return st
	}
	delta := make([]int64, len(tposted)-1)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	slices.Sort(delta)
	m := len(delta) - 2 // LAT_MEASURE_TAIL
	var median int64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	q := 1000.0 * float64(rttFactor) // ns per µs, per direction
	var sum float64
	for _, d := range delta[:m] {
		sum += float64(d) / q
	}
	avg := sum / float64(m)
	var ssum float64
	for _, d := range delta[:m] {
		tv := int(avg - float64(d)/q) // C: int temp_var = average - x
		ssum += float64(int(math.Pow(float64(tv), 2)))
	}
	i99 := int(math.Ceil(float64(m) * 0.99))
	i999 := int(math.Ceil(float64(m) * 0.999))
	st.TMin = float64(delta[0]) / q
	st.TMax = float64(delta[m]) / q
	st.TTypical = float64(median) / q
	st.TAvg = avg
	st.TStdev = math.Sqrt(ssum / float64(m))
	st.P99 = float64(delta[i99]) / q
	st.P999 = float64(delta[i999]) / q
	return st
}

// latDuration computes print_report_lat_duration's average and rate.
func latDuration(size, iters uint64, sampleNS int64, rttFactor int) latStats {
	st := latStats{Size: size, Iters: iters}
	if iters == 0 || sampleNS <= 0 {
		return st
	}
	st.TAvg = float64(sampleNS) / 1000 / float64(rttFactor) / float64(iters)
	st.TPS = float64(iters) / (float64(sampleNS) / 1e9)
	return st
}

// latLine is one row of a latency table (REPORT_FMT_LAT, REPORT_FMT_LAT_DUR)
// with its newline.
func latLine(s latStats, duration bool) string {
	if duration {
		return fmt.Sprintf(" %-7d       %d            %-7.2f        %-7.2f\n", s.Size, s.Iters, s.TAvg, s.TPS)
	}
	return fmt.Sprintf(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		s.Size, s.Iters, s.TMin, s.TMax, s.TTypical, s.TAvg, s.TStdev, s.P99, s.P999)
}

// jsonDest is a QP's keys in --json output.
type jsonDest struct {
	LID      uint32 `json:"lid"`
	QPN      uint32 `json:"qpn"`
	PSN      uint32 `json:"psn"`
	OutReads uint32 `json:"out_reads"`
	RKey     uint32 `json:"rkey"`
	VAddr    uint64 `json:"vaddr"`
	GID      string `json:"gid"`
}

func jsonDests(ds []perftest.Dest) []jsonDest {
	out := make([]jsonDest, len(ds))
	for i, d := range ds {
		out[i] = jsonDest{LID: d.LID, QPN: d.QPN, PSN: d.PSN, OutReads: d.OutReads, RKey: d.RKey, VAddr: d.VAddr,
			GID: netip.AddrFrom16(d.GID).String()}
	}
	return out
}

// jsonBW is one bandwidth result in --json output.
type jsonBW struct {
	Size       uint64  `json:"bytes"`
	Iters      uint64  `json:"iterations"`
	BWPeak     float64 `json:"bw_peak"`
	BWAvg      float64 `json:"bw_average"`
	MsgRateAvg float64 `json:"msg_rate_mpps"`
}

// result is the --json output: the test's parameters and its results.
type result struct {
	Test         string     `json:"test"`
	Title        string     `json:"title"`
	Role         string     `json:"role"`
	Device       string     `json:"device"`
	Transport    string     `json:"transport"`
	Backend      string     `json:"backend"`
	Connection   string     `json:"connection"`
	QPs          int        `json:"qps"`
	MTU          int        `json:"mtu"`
	GIDIndex     int        `json:"gid_index"`
	TxDepth      int        `json:"tx_depth,omitempty"`
	RxDepth      int        `json:"rx_depth,omitempty"`
	CQModeration int        `json:"cq_moderation,omitempty"`
	OutReads     int        `json:"outstanding_reads,omitempty"`
	Duration     int        `json:"duration_s,omitempty"`
	Local        []jsonDest `json:"local"`
	Remote       []jsonDest `json:"remote"`
	BWUnits      string     `json:"bw_units,omitempty"`
	Bandwidth    []jsonBW   `json:"bandwidth,omitempty"`
	// BandwidthLocal and BandwidthRemote are --report-both's rows: each
	// direction of a -b run.
	BandwidthLocal  []jsonBW   `json:"bandwidth_local,omitempty"`
	BandwidthRemote []jsonBW   `json:"bandwidth_remote,omitempty"`
	Latency         []latStats `json:"latency,omitempty"`
	Error           string     `json:"error,omitempty"`
}

func (r *result) addBW(rep perftest.BWReport) {
	r.Bandwidth = append(r.Bandwidth, toJSONBW(rep))
}

func toJSONBW(rep perftest.BWReport) jsonBW {
	return jsonBW{Size: rep.Size, Iters: rep.Iters, BWPeak: rep.BWPeak, BWAvg: rep.BWAvg, MsgRateAvg: rep.MsgRateAvg}
}

func (r *result) write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
