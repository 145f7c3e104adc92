package perf

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestPerfIWARPLoopback runs perf --transport iwarp -R softrdma against
// softrdma on loopback TCP: perftest's comm connection and the test
// connections by rdma_cm over iWARP (MPA revision 2). TestPerfRDMACMLoopback's
// checks (both exit 0, perftest's layout, the keys agree, the rows), the
// header says Transport type IW, and both captures decode with no error, one
// iWARP flow per connection, none with a Terminate.
func TestPerfIWARPLoopback(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
		rows int
	}{
		{test: "write_bw", args: []string{"-n", "5", "-s", "1"}},
		{test: "write_bw", args: []string{"-n", "5", "-s", "1M"}},
		{test: "write_bw", args: []string{"-n", "20", "-s", "4096", "-q", "2"}},
		// 512 iterations, not a multiple of -Q 100, on 4 QPs whose
		// connections progress unevenly: the sender spun for ever (reaped).
		{test: "write_bw", args: []string{"-n", "512", "-s", "4096", "-q", "4"}},
		{test: "read_bw", args: []string{"-n", "5", "-s", "1"}},
		{test: "read_bw", args: []string{"-n", "10", "-s", "65536"}},
		{test: "read_bw", args: []string{"-n", "5", "-s", "1M"}},
		{test: "send_bw", args: []string{"-n", "5", "-s", "1"}},
		{test: "send_bw", args: []string{"-n", "20", "-s", "4096"}},
		{test: "send_bw", args: []string{"-n", "5", "-s", "1M"}},
		// rx depth 8: the sender stalls on the receiver's credit (every 2
		// receives) again and again.
		{test: "send_bw", args: []string{"-n", "300", "-s", "1000", "-r", "8"}},
		{test: "send_bw", args: []string{"-n", "50", "-s", "3000", "-q", "2", "-r", "6"}},
		{test: "write_lat", args: []string{"-n", "10", "-s", "64"}},
		{test: "send_lat", args: []string{"-n", "10", "-s", "64"}},
		{test: "read_lat", args: []string{"-n", "10", "-s", "64"}},
	} {
		args := append([]string{"-R", "--transport", "iwarp"}, c.args...)
		t.Run(c.test+" "+strings.Join(c.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			srvPcap, cliPcap := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")
			r := runPerfPair(t, c.test, args, []string{"--pcap", srvPcap}, []string{"--pcap", cliPcap})
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			checkPerfPair(t, c.test, args, r, c.rows)
			if strings.Contains(r.srvErr+r.cliErr, "disconnecting") {
				t.Errorf("disconnect failed:\n%s", r)
			}
			for _, out := range []string{r.srv, r.cli} {
				if !strings.Contains(out, "Transport type : IW") || !strings.Contains(out, " GID index       : 0\n") {
					t.Errorf("header:\n%s", out)
				}
			}
			conns := 2
			if a := strings.Join(c.args, " "); strings.Contains(a, "-q 2") {
				conns = 3
			} else if strings.Contains(a, "-q 4") {
				conns = 5
			}
			// The IRD/ORD words siw and librdmacm exchange: 0 (rdma_cm's none)
			// but on a READ test connection, where -o's depth (128, the
			// maximum) is asked and granted; checkIWARPCapture allows the
			// ORD of 1 the Read RTR needs.
			depth := uint16(0)
			if strings.HasPrefix(c.test, "read_") {
				depth = 128
			}
			for _, f := range []string{srvPcap, cliPcap} {
				checkIWARPCapture(t, f, conns, depth)
			}
		})
	}
}

// TestPerfIWARPLargeFPDUs: between two softrdma perf processes the test
// connections take softrdma's extensions, so WRITE FPDUs grow to 64 KiB (the
// 16-bit MPA length's limit) instead of the MULPDU of the TCP MSS (32 762
// octets on loopback, where perf stayed while it offered no extensions).
func TestPerfIWARPLargeFPDUs(t *testing.T) {
	f := filepath.Join(t.TempDir(), "cli.pcap")
	r := runPerfPair(t, "write_bw", []string{"-R", "--transport", "iwarp", "-n", "5", "-s", "1M"}, nil, []string{"--pcap", f})
	if r.srvCode != 0 || r.cliCode != 0 {
		t.Fatalf("exchange failed\n%s", r)
	}
	fh, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out bytes.Buffer
	if _, err := decode.Run(fh, &out, decode.Options{JSON: true}); err != nil {
		t.Fatal(err)
	}
	longest, writes := 0, 0
	for _, line := range strings.Split(out.String(), "\n") {
		var p struct {
			Opcode   string `json:"opcode"`
			ULPDULen int    `json:"ulpdu_len"`
		}
		if json.Unmarshal([]byte(line), &p) != nil || p.Opcode != "Write" {
			continue
		}
		writes++
		longest = max(longest, p.ULPDULen)
	}
	if writes == 0 || longest < 65000 {
		t.Errorf("%d WRITE FPDUs, the longest ULPDU %d octets: want FPDUs of about 64 KiB", writes, longest)
	}
}

// checkIWARPCapture decodes a perf capture: no error, conns connections (the
// comm connection first), each MPA revision 2 without CRC and without a
// Terminate; IRD = ORD = 0 on the comm connection, testDepth on the others.
func checkIWARPCapture(t *testing.T, file string, conns int, testDepth uint16) {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	res, err := decode.Run(fh, io.Discard, decode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 0 || len(res.Flows) != conns {
		t.Errorf("%s: %d flows (want %d), errors %v", filepath.Base(file), len(res.Flows), conns, res.Errors)
	}
	for i, f := range res.Flows {
		if f.MPA == nil || f.MPA.Revision != 2 || f.MPA.CRC || f.Terminates != 0 || f.Errors != 0 {
			t.Errorf("%s: flow %+v (MPA %+v)", filepath.Base(file), f, f.MPA)
			continue
		}
		want := testDepth
		if i == 0 {
			want = 0
		}
		// The request's words: the initiator asks for the Read RTR
		// (rdmacm.initiatorRTR), which raises an ORD of 0 to 1.
		if f.MPA.IRD == nil || f.MPA.ORD == nil || *f.MPA.IRD != want || *f.MPA.ORD != max(want, 1) {
			t.Errorf("%s: flow %d: MPA IRD %v ORD %v, want %d and %d", filepath.Base(file), i, f.MPA.IRD, f.MPA.ORD, want, max(want, 1))
		}
	}
}

// TestPerfIWARPOptions: what --transport iwarp accepts and refuses.
func TestPerfIWARPOptions(t *testing.T) {
	for _, c := range []struct{ args, wantErr string }{
		{"write_bw --transport iwarp", "needs -R"},
		{"write_bw --transport iwarp -z", "needs -R"},
		{"atomic_bw --transport iwarp -R", "no atomics"},
		{"send_bw --transport iwarp -R -b", "not implemented"},
		{"write_bw --transport iwarp -R --backend afpacket", "RoCE's"},
		{"write_bw --transport iwarp -R --crc sometimes", "--crc"},
		{"write_bw -R --crc request", "iWARP's"},
		{"write_bw --transport iwarp -R --crc require", ""},
		{"read_bw --transport iwarp -R -b", ""},
		{"send_lat --transport iwarp -R", ""},
	} {
		o, err := parseArgs(strings.Fields(c.args), io.Discard)
		if err == nil {
			_, err = derive(o)
		}
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.args, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one with %q", c.args, err, c.wantErr)
		}
	}
}

// TestPerfCreditWindow: the sender's window (run_iter_bw's swindow) and the
// receiver's credit WRITEs (run_iter_bw_server): every rx_depth/3 receives,
// counting within rx_depth, the count in little-endian order.
func TestPerfCreditWindow(t *testing.T) {
	dev, err := iwarp.Open(iwarp.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pd := dev.Context().AllocPD()
	mr, err := pd.RegMR(make([]byte, 4*2*3), ibtransport.AccessLocalWrite|ibtransport.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	c := &credit{mr: mr, nqp: 2, ring: 2, every: 2, rxDepth: 6}
	binary.LittleEndian.PutUint32(mr.Buf()[4:], 4) // QP 1's credit: 4 received
	// SEND k may go while k+1-4 < 6.
	for k, want := range map[uint64]bool{0: true, 3: true, 4: true, 8: true, 9: false, 12: false} {
		if got := c.mayPost(1, k); got != want {
			t.Errorf("QP 1, SEND %d with credit 4: %v, want %v", k, got, want)
		}
	}
	if c.mayPost(0, 5) {
		t.Error("QP 0 without credit may post its sixth SEND")
	}
	c.reset()
	if c.mayPost(1, 5) {
		t.Error("reset left QP 1's credit")
	}
	// The receiver's schedule: with rx depth 6 and every 2, after receives
	// 2, 4, 6 (6%6 = 0), 8, ...; with rx depth 20 and every 6 (5 iterations of
	// ib_send_bw -n 20), after 6, 12, 18 and 20.
	var got []string
	for rcnt := uint64(1); rcnt <= 13; rcnt++ {
		if c.due(rcnt) {
			got = append(got, strconv.FormatUint(rcnt, 10))
		}
	}
	c20 := &credit{every: 6, rxDepth: 20}
	for rcnt := uint64(1); rcnt <= 20; rcnt++ {
		if c20.due(rcnt) {
			got = append(got, strconv.FormatUint(rcnt, 10))
		}
	}
	if s := strings.Join(got, " "); s != "2 4 6 8 10 12 6 12 18 20" {
		t.Errorf("credit WRITEs after %s receives", s)
	}
}

// TestPerfCreditGivesUp: an ib_send_bw sender over iWARP that waits for the
// receiver's credit gives up when its QP is in the error state (the peer
// ended the connection: no credit WRITE comes, and with nothing in flight no
// completion either) and when nothing has moved for the no-progress limit. It
// waited forever: each of its short waits for the credit word began the
// no-progress limit again, and it never looked at the QP. An rx depth of 1
// makes SEND 0 wait for credit already, and no credit comes; the context's
// timeout only ends the test of a sender that waits on.
func TestPerfCreditGivesUp(t *testing.T) {
	for _, c := range []struct {
		name       string
		qpErr      bool
		noProgress time.Duration
		want       string
	}{
		{name: "QP error", qpErr: true, want: "QP 0 is in state"},
		{name: "no progress", noProgress: 20 * time.Millisecond, want: "no credit from the receiver for 20ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev, err := iwarp.Open(iwarp.DeviceConfig{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := dev.Context()
			pd := ctx.AllocPD()
			cq, err := ctx.CreateCQ(16)
			if err != nil {
				t.Fatal(err)
			}
			qp, err := ctx.CreateQP(pd, ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: cq, RecvCQ: cq,
				Cap: ibtransport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if c.qpErr {
				if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateErr}, ibtransport.QPAttrState); err != nil {
					t.Fatal(err)
				}
			}
			mr, err := pd.RegMR(make([]byte, 4*(1+4)), ibtransport.AccessLocalWrite|ibtransport.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			p := &params{verb: verbSend, bw: true, iters: 5, txDepth: 4, rxDepth: 1, cqMod: 1, noPeak: true}
			s := &session{p: p, qps: []*ibtransport.QP{qp}, sendCQ: cq, wc: make([]ibtransport.WC, 16),
				credit: &credit{mr: mr, nqp: 1, ring: 4, every: 1, rxDepth: 1}, noProgress: c.noProgress}
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = s.runBWSender(rctx, 64)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("runBWSender: %v, want an error with %q", err, c.want)
			}
		})
	}
}
