package perf

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/oob/perftest"
)

// The files in testdata/outjson were written by Debian's perftest 4.5-0.17
// (ib_write_bw, ib_send_bw, ib_read_bw, ib_read_lat, ib_send_lat) with
// --out_json, run over softrdma's libraries (softrdma run --device
// roce:127.0.0.22 and .23; device sr_roce0, MTU 4096, GID index 1) with the
// arguments below.
var outJSONFiles = []struct {
	file, test string
	args       []string // besides --out_json; the client also has the HOST
}{
	{"writebw.srv.json", "write_bw", []string{"-n", "20", "-s", "4096"}},
	{"writebw.cli.json", "write_bw", []string{"-n", "20", "-s", "4096", "host"}},
	{"writebwB.srv.json", "write_bw", []string{"-n", "20", "-s", "4096", "-b", "--report-both"}},
	{"writebwB.cli.json", "write_bw", []string{"-n", "20", "-s", "4096", "-b", "--report-both", "host"}},
	{"sendbw.srv.json", "send_bw", []string{"-n", "20", "-s", "1000"}},
	{"sendbw.cli.json", "send_bw", []string{"-n", "20", "-s", "1000", "host"}},
	{"readbw.srv.json", "read_bw", []string{"-n", "20", "-s", "4096", "--report_gbits"}},
	{"readbw.cli.json", "read_bw", []string{"-n", "20", "-s", "4096", "--report_gbits", "host"}},
	{"readlat.cli.json", "read_lat", []string{"-n", "20", "-s", "64", "host"}},
	{"sendlatD.srv.json", "send_lat", []string{"-D", "2"}},
	{"sendlatD.cli.json", "send_lat", []string{"-D", "2", "host"}},
}

var outJSONValueRE = regexp.MustCompile(`(?m)^([A-Za-z_0-9.]+): ([0-9.]+),$`)

// outJSONValues returns the numbers of a file's results block by key.
func outJSONValues(t *testing.T, file string) map[string]string {
	t.Helper()
	i := strings.Index(file, "results: {\n")
	if i < 0 {
		t.Fatalf("no results block:\n%s", file)
	}
	v := map[string]string{}
	for _, m := range outJSONValueRE.FindAllStringSubmatch(file[i:], -1) {
		v[m[1]] = m[2]
	}
	return v
}

// TestPerfOutJSONMatchesPerftest rebuilds each file perftest wrote from
// softrdma's parts: the test information from the arguments, as derive and
// setup make it, and the results block from the numbers in the file. The
// text must be perftest's byte for byte.
func TestPerfOutJSONMatchesPerftest(t *testing.T) {
	for _, c := range outJSONFiles {
		t.Run(c.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "outjson", c.file))
			if err != nil {
				t.Fatal(err)
			}
			want := string(b)
			o, err := parseArgs(append([]string{c.test, "--out_json"}, c.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			p, err := derive(o)
			if err != nil {
				t.Fatal(err)
			}
			outReads := 1
			if p.verb == verbRead || p.verb == verbAtomic {
				outReads = 128
			}
			ti := testInfo{p: p, device: "sr_roce0", mtu: 4096, gidIndex: 1, outReads: outReads}
			v := outJSONValues(t, want)
			f := func(k string) float64 { return atof(t, v[k]) }
			var results string
			switch {
			case p.bw:
				results = outJSONBW(perftest.BWReport{Size: atoi(t, v["MsgSize"]), Iters: atoi(t, v["n_iterations"]),
					BWPeak: f("BW_peak"), BWAvg: f("BW_average"), MsgRateAvg: f("MsgRate")}, p.gbits)
			case p.durationMode():
				results = outJSONLat(latStats{Size: atoi(t, v["MsgSize"]), Iters: atoi(t, v["n_iterations"]),
					TAvg: f("t_avg"), TPS: f("tps_average")}, true)
			default:
				results = outJSONLat(latStats{Size: atoi(t, v["MsgSize"]), Iters: atoi(t, v["n_iterations"]),
					TMin: f("t_min"), TMax: f("t_max"), TTypical: f("t_typical"), TAvg: f("t_avg"), TStdev: f("t_stdev"),
					P99: f("percentile_99"), P999: f("percentile_99.9")}, false)
			}
			path := filepath.Join(t.TempDir(), "out.json")
			(&outJSONFile{path: path, info: &ti, stderr: io.Discard}).write(results)
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("softrdma's file:\n%s\nperftest's:\n%s", got, want)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("file mode %v, %v: want 0600 (open_file_write's S_IRUSR|S_IWUSR)", st.Mode(), err)
			}
		})
	}
}

// TestPerfOutJSONLoopback runs pairs with --out_json: each side's file holds
// its test information and the last row it printed, with the numbers of that
// row; -a leaves the last size's (perftest truncates the file at each row);
// --report-both leaves the remote direction's, printed last.
func TestPerfOutJSONLoopback(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
	}{
		{"write_bw", []string{"-n", "20", "-s", "3000"}},
		{"send_lat", []string{"-n", "20", "-s", "100"}},
		{"read_bw", []string{"-n", "5", "-a", "-u", "20"}},
		{"write_bw", []string{"-n", "20", "-s", "4096", "-b", "--report-both"}},
	} {
		t.Run(c.test+" "+strings.Join(c.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			srvFile, cliFile := filepath.Join(dir, "srv.json"), filepath.Join(dir, "cli.json")
			r := runPerfPair(t, c.test, append([]string{"--out_json"}, c.args...),
				[]string{"--out_json_file", srvFile}, []string{"--out_json_file", cliFile})
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			for _, side := range []struct{ name, out, file string }{{"server", r.srv, srvFile}, {"client", r.cli, cliFile}} {
				b, err := os.ReadFile(side.file)
				if err != nil {
					t.Fatal(err)
				}
				file := string(b)
				if !strings.HasPrefix(file, "{\ntest_info: {\ntest: ") || !strings.HasSuffix(file, ",\n},\n}\n") ||
					!strings.Contains(file, "\nDevice: \"") || !strings.Contains(file, "\nMtu: 4096,\n") {
					t.Errorf("%s's file:\n%s", side.name, file)
				}
				if strings.Count(file, "results: {") != 1 {
					t.Errorf("%s's file has %d results blocks:\n%s", side.name, strings.Count(file, "results: {"), file)
				}
				// The file's numbers are the last row's on stdout.
				v := outJSONValues(t, file)
				var last []string
				for _, l := range strings.Split(side.out, "\n") {
					if bwRowRE.MatchString(l) || latRowRE.MatchString(l) {
						last = strings.Fields(l)
					}
				}
				if len(last) < 4 {
					t.Fatalf("%s printed no row:\n%s", side.name, side.out)
				}
				keys := []string{"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}
				if !strings.HasSuffix(c.test, "_bw") {
					keys = []string{"MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9"}
				}
				for i, k := range keys {
					if v[k] != last[i] {
						t.Errorf("%s: file's %s is %q, the last row's %q\nrow %v\nfile:\n%s", side.name, k, v[k], last[i], last, file)
					}
				}
				if c.test == "read_bw" { // -a
					if v["MsgSize"] != strconv.Itoa(maxSize) {
						t.Errorf("%s: -a's file has size %s, want the last, %d", side.name, v["MsgSize"], maxSize)
					}
				}
			}
		})
	}
}

// TestPerfReportBoth: with -b --report-both each side prints, after the
// summed row, its own direction and the peer's, each under a table of its
// own, as ib_write_bw does (testdata/outjson/writebwB.cli.report-both.txt is
// its client's tail); the two rows add up to the sum.
func TestPerfReportBoth(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "outjson", "writebwB.cli.report-both.txt"))
	if err != nil {
		t.Fatal(err)
	}
	shape := func(s string) string { // rows' numbers masked
		re := regexp.MustCompile(`(?m)^ \d+ .*$`)
		return re.ReplaceAllString(s, "ROW")
	}
	r := runPerfPair(t, "write_bw", []string{"-n", "20", "-s", "4096", "-b", "--report-both"}, nil, nil)
	if r.srvCode != 0 || r.cliCode != 0 {
		t.Fatalf("exchange failed\n%s", r)
	}
	for name, out := range map[string]string{"server": r.srv, "client": r.cli} {
		lines := strings.Split(out, "\n")
		tail := strings.Join(lines[len(lines)-13:], "\n")
		if shape(tail) != shape(string(b)) {
			t.Errorf("%s's tail:\n%s\nperftest's:\n%s", name, tail, b)
		}
		var rows [][]string
		for _, l := range lines {
			if bwRowRE.MatchString(l) {
				rows = append(rows, bwRowRE.FindStringSubmatch(l)[1:])
			}
		}
		if len(rows) != 3 {
			t.Fatalf("%s: %d rows, want 3 (sum, local, remote):\n%s", name, len(rows), out)
		}
		if sum, l, rm := atof(t, rows[0][3]), atof(t, rows[1][3]), atof(t, rows[2][3]); sum-(l+rm) > 0.011 || l+rm-sum > 0.011 {
			t.Errorf("%s: average %v is not local %v + remote %v", name, sum, l, rm)
		}
	}
	// Without -b there are no directions to report.
	r = runPerfPair(t, "write_bw", []string{"-n", "20", "-s", "4096", "--report-both"}, nil, nil)
	if r.srvCode != 0 || r.cliCode != 0 || strings.Contains(r.cli+r.srv, "Local results") {
		t.Errorf("--report-both without -b:\n%s", r)
	}
}

// TestPerfJSONKeys: --json's keys are snake_case, as every command's
// (cmd/softrdma's TestJSONKeysSnakeCase checks the others').
func TestPerfJSONKeys(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	var walk func(ty reflect.Type)
	seen := map[reflect.Type]bool{}
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if !snake.MatchString(name) {
				t.Errorf("%s.%s: key %q", ty.Name(), f.Name, name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(result{}))
}
