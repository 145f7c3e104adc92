package perf

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rowCounter is a side's stdout that cancels the run once it has seen rows
// bandwidth rows: --run_infinitely's runs are stopped as a user stops them.
type rowCounter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	rows   int
	want   int
	cancel context.CancelFunc
}

func (w *rowCounter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	w.rows = 0
	for _, l := range strings.Split(w.buf.String(), "\n") {
		if bwRowRE.MatchString(l) {
			w.rows++
		}
	}
	if w.rows >= w.want {
		w.cancel()
	}
	return len(b), nil
}

func (w *rowCounter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runInfinitePair runs a --run_infinitely pair that is stopped (both sides'
// context cancelled) once the side named by stopOn has printed rows rows.
func runInfinitePair(t *testing.T, test string, args, cliExtra []string, stopOn string, rows int) (srv, cli *rowCounter, srvCode, cliCode int, srvErr, cliErr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A bound on the test: far beyond rows × -D.
	limit := time.AfterFunc(60*time.Second, cancel)
	defer limit.Stop()
	srv, cli = &rowCounter{want: 1 << 30, cancel: cancel}, &rowCounter{want: 1 << 30, cancel: cancel}
	if stopOn == "server" {
		srv.want = rows
	} else {
		cli.want = rows
	}
	srvIP, cliIP := nextPerfIP(), nextPerfIP()
	var se, ce bytes.Buffer
	o, err := parseArgs(append([]string{test, "-d", srvIP, "-p", "0", "--run_infinitely"}, args...), &se)
	if err != nil {
		t.Fatal(err)
	}
	o.Context = ctx
	addr := make(chan net.Addr, 1)
	o.Listening = func(a net.Addr) { addr <- a }
	done := make(chan int, 1)
	go func() { done <- Main(o, srv, &se) }()
	var port int
	select {
	case a := <-addr:
		port = a.(*net.TCPAddr).Port
	case code := <-done:
		t.Fatalf("server exited %d before listening: %s", code, se.String())
	}
	oc, err := parseArgs(append(append([]string{test, "-d", cliIP, "-p", strconv.Itoa(port), "--run_infinitely"}, append(args, cliExtra...)...), srvIP), &ce)
	if err != nil {
		t.Fatal(err)
	}
	oc.Context = ctx
	cliCode = Main(oc, cli, &ce)
	srvCode = <-done
	if srv.rows < srv.want && cli.rows < cli.want {
		t.Fatalf("the run was not stopped by its rows (server %d, client %d rows)\nserver:\n%s%s\nclient:\n%s%s", srv.rows, cli.rows, srv, se.String(), cli, ce.String())
	}
	return srv, cli, srvCode, cliCode, se.String(), ce.String()
}

// TestPerfRunInfinitely: with --run_infinitely the sender (and ib_send_bw's
// receiver) prints a row every -D seconds, each for the messages of its own
// interval (no peak: 0.00, iterations a multiple of the CQ moderation for a
// sender), until it is stopped; then it closes the table and exits 0. The
// client's --out_json file holds its last row, as perftest rewrites it at
// each.
func TestPerfRunInfinitely(t *testing.T) {
	if testing.Short() {
		t.Skip("rows come every second")
	}
	for _, c := range []struct {
		test   string
		args   []string
		stopOn string
	}{
		{"write_bw", []string{"-D", "1", "-s", "4096"}, "client"},
		{"send_bw", []string{"-D", "1", "-s", "1024"}, "server"},
		{"read_bw", []string{"-D", "1", "-s", "2048", "-b"}, "server"},
	} {
		t.Run(c.test+" "+strings.Join(c.args, " "), func(t *testing.T) {
			const rows = 3
			outJSON := filepath.Join(t.TempDir(), "cli.json")
			srv, cli, srvCode, cliCode, se, ce := runInfinitePair(t, c.test, c.args, []string{"--out_json", "--out_json_file", outJSON}, c.stopOn, rows)
			if cliCode != 0 {
				t.Errorf("client exit %d: %s\n%s", cliCode, ce, cli)
			}
			// ib_write_bw's server waits for the client's end of the
			// exchange: stopped, it ends as cleanly.
			if srvCode != 0 {
				t.Errorf("server exit %d: %s\n%s", srvCode, se, srv)
			}
			for _, side := range []struct {
				name string
				out  string
				rows bool
			}{{"client", cli.String(), true}, {"server", srv.String(), c.test == "send_bw" || c.test == "read_bw"}} {
				if !strings.HasSuffix(side.out, resultLine) {
					t.Errorf("%s's output does not end with the closing line:\n%s", side.name, side.out)
				}
				var got [][]string
				for _, l := range strings.Split(side.out, "\n") {
					if m := bwRowRE.FindStringSubmatch(l); m != nil {
						got = append(got, m[1:])
					}
				}
				if !side.rows {
					if len(got) != 0 {
						t.Errorf("%s printed rows:\n%s", side.name, side.out)
					}
					continue
				}
				min := rows
				if side.name != c.stopOn {
					min = 1 // the other side was stopped at the same time, give or take a row
				}
				if len(got) < min {
					t.Fatalf("%s printed %d rows, want at least %d:\n%s", side.name, len(got), min, side.out)
				}
				if side.name == "client" {
					b, err := os.ReadFile(outJSON)
					if err != nil {
						t.Fatal(err)
					}
					last := got[len(got)-1]
					if v := outJSONValues(t, string(b)); v["n_iterations"] != last[1] || v["BW_average"] != last[3] || v["BW_peak"] != "0.00" {
						t.Errorf("--out_json file %v, the last row %v", v, last)
					}
				}
				for _, r := range got {
					n, _ := strconv.Atoi(r[1])
					if r[2] != "0.00" || n == 0 || atof(t, r[3]) <= 0 {
						t.Errorf("%s: row %v: want no peak, messages and a bandwidth", side.name, r)
					}
					if c.test != "send_bw" && n%100 != 0 {
						t.Errorf("%s: row %v: %d messages is not a multiple of the CQ moderation, 100", side.name, r, n)
					}
				}
			}
		})
	}
}

// TestPerfRunInfinitelyRefused: only _bw tests run infinitely, one size, and
// not ib_send_bw -b (perftest's force_dependecies).
func TestPerfRunInfinitelyRefused(t *testing.T) {
	for _, args := range []string{"write_lat --run_infinitely", "send_bw -b --run_infinitely", "write_bw -a --run_infinitely"} {
		var out, errOut bytes.Buffer
		if code := command(strings.Fields(args), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "run_infinitely") {
			t.Errorf("%s: exit %d: %s", args, code, errOut.String())
		}
	}
	o, err := parseArgs(strings.Fields("write_bw --run_infinitely host"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := derive(o)
	if err != nil || !p.infinite || p.duration != defDuration || !p.noPeak {
		t.Errorf("write_bw --run_infinitely: %+v, %v; want a row every %d s with no peak", p, err, defDuration)
	}
}
