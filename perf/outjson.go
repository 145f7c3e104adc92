package perf

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/softrdma/softrdma/oob/perftest"
)

// perftest's --out_json writes a report file (--out_json_file, default
// perftest_out.json in the working directory). Its format, read from
// perftest 4.5-0.17's write_test_info_to_file, write_bw_report_to_file,
// write_report_lat_to_file and write_report_lat_duration_to_file, and checked
// against the file ib_write_bw wrote over softrdma's libraries, is not JSON:
// the keys are bare words, every value line ends in a comma, the two blocks
// ("test_info", "results") too. It is reproduced byte for byte, so that a
// script that reads perftest's file reads softrdma's; --json is softrdma's
// own, real JSON with snake_case keys.
//
// perftest opens the file with O_TRUNC each time it prints a result row
// (print_full_bw_report, print_report_lat, print_report_lat_duration): after
// -a, or a -b run's summed row, or --report-both's two rows, or each
// --run_infinitely interval, the file holds the last row only.

// DefaultOutJSONFile is perftest's DEFAULT_JSON_FILE_NAME.
const DefaultOutJSONFile = "perftest_out.json"

// writeOutJSON appends the "test_info" block: ctx_print_test_info's lines
// with underscores for spaces.
func (ti *testInfo) writeOutJSON(b *strings.Builder) {
	p := ti.p
	onOff := func(v bool) string {
		if v {
			return "ON"
		}
		return "OFF"
	}
	b.WriteString("test_info: {\n")
	fmt.Fprintf(b, "test: %s,\n", strings.ReplaceAll(title(p), " ", "_"))
	fmt.Fprintf(b, "Dual_port: %s,\nDevice: %q,\n", "OFF", ti.device)
	fmt.Fprintf(b, "Number_of_qps: %d,\nTransport_type: %s,\n", p.qps, ti.transport())
	fmt.Fprintf(b, "Connection_type: %s,\nUsing_SRQ: %s,\n", p.conn, "OFF")
	fmt.Fprintf(b, "PCIe_relax_order: %s,\n", onOff(p.test != perftest.WriteLat))
	b.WriteString("ibv_wr_API: OFF,\n")
	if !p.server || p.duplex {
		fmt.Fprintf(b, "TX_depth : %d,\n", p.txDepth) // perftest's space before the colon
	}
	if p.verb == verbSend && (p.server || p.duplex) {
		fmt.Fprintf(b, "RX_depth: %d,\n", p.rxDepth)
	}
	if p.bw {
		fmt.Fprintf(b, "CQ_Moderation: %d,\n", p.cqMod)
	}
	fmt.Fprintf(b, "Mtu: %d,\n", ti.mtu)
	b.WriteString("Link_type: Ethernet,\n")
	fmt.Fprintf(b, "GID_index: %d,\n", ti.gidIndex)
	if p.verb != verbRead && p.verb != verbAtomic {
		fmt.Fprintf(b, "Max_inline_data: %d,\n", p.inline)
	} else {
		fmt.Fprintf(b, "Outstand_reads: %d,\n", ti.outReads)
	}
	fmt.Fprintf(b, "rdma_cm_QPs: %s,\n", onOff(p.rdmaCM))
	method := "Ethernet"
	if p.useCM {
		method = "rdma_cm"
	}
	fmt.Fprintf(b, "Data_ex_method: %s,\n", method)
	b.WriteString("},\n")
}

// outJSONBW is write_bw_report_to_file's block for one row (REPORT_FMT_JSON,
// or REPORT_FMT_EXT_JSON's six decimals where the table row has them).
func outJSONBW(r perftest.BWReport, gbits bool) string {
	f := "%.2f"
	if r.BWAvg < 0.1 && gbits {
		f = "%.6f"
	}
	return fmt.Sprintf("results: {\nMsgSize: %d,\nn_iterations: %d,\nBW_peak: "+f+",\nBW_average: "+f+",\nMsgRate: %.6f,\n},\n",
		r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRateAvg)
}

// outJSONLat is write_report_lat_to_file's block (REPORT_FMT_LAT_JSON), or
// with -D write_report_lat_duration_to_file's (REPORT_FMT_LAT_DUR_JSON).
func outJSONLat(s latStats, duration bool) string {
	if duration {
		return fmt.Sprintf("results: {\nMsgSize: %d,\nn_iterations: %d,\nt_avg: %.2f,\ntps_average: %.2f,\n},\n",
			s.Size, s.Iters, s.TAvg, s.TPS)
	}
	return fmt.Sprintf("results: {\nMsgSize: %d,\nn_iterations: %d,\nt_min: %.2f,\nt_max: %.2f,\nt_typical: %.2f,\nt_avg: %.2f,\n"+
		"t_stdev: %.2f,\npercentile_99: %.2f,\npercentile_99.9: %.2f,\n},\n",
		s.Size, s.Iters, s.TMin, s.TMax, s.TTypical, s.TAvg, s.TStdev, s.P99, s.P999)
}

// outJSONFile rewrites the --out_json file with the test's information and
// one row's results. Like perftest, a file it cannot open is reported on
// stderr ("failed to open FILE") and the run goes on.
type outJSONFile struct {
	path   string
	info   *testInfo
	stderr io.Writer
}

func (f *outJSONFile) write(results string) {
	if f == nil || f.info == nil {
		return
	}
	var b strings.Builder
	b.WriteString("{\n")
	f.info.writeOutJSON(&b)
	b.WriteString(results)
	b.WriteString("}\n")
	// open_file_write: O_CREAT|O_RDWR|O_TRUNC, S_IRUSR|S_IWUSR.
	fh, err := os.OpenFile(f.path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		fmt.Fprintf(f.stderr, "failed to open %s\n", f.path)
		return
	}
	_, err = io.WriteString(fh, b.String())
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(f.stderr, "softrdma perf: --out_json_file %s: %v\n", f.path, err)
	}
}

// newOutJSON returns the --out_json file of o, or nil without --out_json.
func newOutJSON(o *Options, stderr io.Writer) *outJSONFile {
	if !o.OutJSON {
		return nil
	}
	path := o.OutJSONFile
	if path == "" {
		path = DefaultOutJSONFile
	}
	return &outJSONFile{path: path, stderr: stderr}
}
