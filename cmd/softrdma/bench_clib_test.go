package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchCLib runs the clib rows (ib_write_bw and ib_send_lat on the
// drop-in library, built here with make lib, beside softrdma perf, this test
// binary run as softrdma) with a few iterations between two random loopback
// addresses: each row must run and carry a number for both tools. Nothing is
// asserted about the numbers. It skips without gcc, rdma-core's headers or
// perftest.
func TestBenchCLib(t *testing.T) {
	for _, tool := range []string{"make", "gcc", "ib_write_bw", "ib_send_lat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/deps.sh installs gcc and libibverbs-dev; apt-get install perftest)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("needs rdma-core's headers, libibverbs-dev")
	}
	lib := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", filepath.Join("..", ".."), "lib", "LIBDIR="+lib).CombinedOutput(); err != nil {
		t.Fatalf("make lib: %v\n%s", err, out)
	}
	t.Setenv(mainEnv, "1") // softrdma perf is this binary
	net3 := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(100), 1+rand.IntN(250))
	var stdout, stderr bytes.Buffer
	args := []string{"--tests", "clib", "--addrs", net3 + "1," + net3 + "2", "--clib-iters", "20", "--lib", lib, "--json"}
	if code := benchCmd(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep benchReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	if len(rep.Rows) != len(benchCLibRows) {
		t.Fatalf("%d rows, want %d: %+v", len(rep.Rows), len(benchCLibRows), rep.Rows)
	}
	for i, r := range rep.Rows {
		c := benchCLibRows[i]
		if !strings.HasPrefix(r.Test, c.prog+" / perf "+c.perf) || r.Size != c.size {
			t.Errorf("row %d: %s %d, want %s at %d", i, r.Test, r.Size, c.prog, c.size)
		}
		if r.Note != "" || r.Value <= 0 || r.Base <= 0 || r.Ratio <= 0 {
			t.Errorf("%s: no numbers: %+v", r.Test, r)
		}
		if err := benchMeasured(r); err != nil {
			t.Error(err)
		}
	}
}

// TestBenchParsePerftest reads the result rows perftest (and softrdma perf)
// print: the BW average of a bandwidth test, t_typical of a latency test, and
// the MTU; output without a row is an error.
func TestBenchParsePerftest(t *testing.T) {
	const bw = ` Mtu             : 1024[B]
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      5000             0.00               671.41 		   0.010743
---------------------------------------------------------------------------------------
`
	const lat = ` Mtu             : 4096[B]
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      5000          10.12          3239.66      25.37    	       36.45       	66.23  		239.94  		1075.23 
---------------------------------------------------------------------------------------
`
	for _, tc := range []struct {
		out  string
		lat  bool
		want float64
		mtu  int
		ok   bool
	}{
		{bw, false, 671.41, 1024, true},
		{lat, true, 25.37, 4096, true},
		{"Couldn't connect to 127.0.0.1:18515\n", false, 0, 0, false},
		{" #bytes #iterations t_min\n 64 5\n", true, 0, 0, false},
	} {
		res, err := benchParsePerftest(tc.out, tc.lat)
		if (err == nil) != tc.ok || (tc.ok && (res.value != tc.want || res.mtu != tc.mtu)) {
			t.Errorf("%q: %+v, %v; want %v MTU %d ok %v", tc.out, res, err, tc.want, tc.mtu, tc.ok)
		}
	}
}
