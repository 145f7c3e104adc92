package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mainEnv makes the test binary, run with it set to 1, the softrdma command itself:
// tests that need softrdma in another network namespace run it that way.
const mainEnv = "SOFTRDMA_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// loopbackCaptureScript runs in a fresh network namespace (unshare -n): softrdma perf
// write_bw over the UDP backend between two addresses of lo, watched by tcpdump on lo
// (Ethernet) and on any (LINUX_SLL2). Each tcpdump is waited for until it says it
// listens; after the run, a marker datagram (UDP port 9) is sent and each tcpdump
// stopped once its file holds the marker, so that neither loses the run's last frames
// still in its buffer.
const loopbackCaptureScript = `set -e
ip link set lo up
ip addr add 10.9.0.1/32 dev lo
ip addr add 10.9.0.2/32 dev lo
for i in lo any; do
  tcpdump -i $i -U -B 32768 -s 0 -w $i.pcap 'udp port 4791 or tcp port 18515 or udp port 9' 2>$i.log &
  echo $! > $i.pid
done
for i in lo any; do
  n=0; until grep -q 'listening on' $i.log; do n=$((n+1)); [ $n -lt 1000 ] || exit 3; sleep 0.01; done
done
"$SOFTRDMA" perf write_bw -d 10.9.0.1 -n 200 -s 16384 >server.log 2>&1 &
server=$!
"$SOFTRDMA" perf write_bw -d 10.9.0.2 -n 200 -s 16384 --wait 10s 10.9.0.1 >client.log 2>&1
wait $server
bash -c 'echo softrdma-capture-end >/dev/udp/10.9.0.1/9'
for i in lo any; do
  n=0; until grep -qa softrdma-capture-end $i.pcap; do n=$((n+1)); [ $n -lt 1000 ] || exit 4; sleep 0.01; done
  kill -INT $(cat $i.pid)
done
wait
`

var droppedRE = regexp.MustCompile(`([0-9]+) packets dropped by kernel`)

// TestDecodeRealLoopbackCapture captures softrdma perf over the UDP backend on the
// loopback of a namespace it creates, with tcpdump -i lo and -i any: the captures hold
// UDP GSO super-datagrams (the backend's sends, unsegmented on the sending host), and
// the second is LINUX_SLL2. Both decode without an error, the super-datagrams split (a
// note), the RDMA frames those tshark finds, and, unless tcpdump lost frames, every
// message of the run and no PSN gap.
func TestDecodeRealLoopbackCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: tcpdump and a network namespace")
	}
	for _, tool := range []string{"tcpdump", "unshare", "ip", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // tcpdump may drop to its own user
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-n", "sh", "-c", loopbackCaptureScript)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), mainEnv+"=1", "SOFTRDMA="+self)
	if out, err := cmd.CombinedOutput(); err != nil {
		logs, _ := exec.Command("sh", "-c", "cd "+dir+" && tail -n 5 *.log").CombinedOutput()
		t.Fatalf("capture: %v\n%s\n%s", err, out, logs)
	}
	for _, tc := range []struct{ iface, link string }{{"lo", "EN10MB"}, {"any", "LINUX_SLL2"}} {
		capture := filepath.Join(dir, tc.iface+".pcap")
		log, _ := os.ReadFile(filepath.Join(dir, tc.iface+".log"))
		dropped := -1
		if m := droppedRE.FindSubmatch(log); m != nil {
			dropped, _ = strconv.Atoi(string(m[1]))
		}
		if !bytes.Contains(log, []byte(tc.link)) {
			t.Errorf("tcpdump -i %s: not %s: %s", tc.iface, tc.link, log)
		}
		var stdout, stderr bytes.Buffer
		code := runDecode([]string{"--json", capture}, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		var sum struct {
			Summary struct {
				RDMAFrames int `json:"rdma_frames"`
				Packets    int `json:"packets"`
				Errors     int `json:"errors"`
				Notes      []struct {
					Reason string `json:"reason"`
				} `json:"notes"`
				Flows []struct {
					Messages map[string]int `json:"messages"`
					PSNGaps  int            `json:"psn_gaps"`
				} `json:"flows"`
			} `json:"summary"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
			t.Fatalf("-i %s: %v", tc.iface, err)
		}
		s := sum.Summary
		what := fmt.Sprintf("tcpdump -i %s (%d dropped)", tc.iface, dropped)
		if code != 0 || s.Errors != 0 {
			t.Errorf("%s: exit %d, %d errors\n%s", what, code, s.Errors, stderr.String())
		}
		gso := false
		for _, n := range s.Notes {
			gso = gso || strings.Contains(n.Reason, "UDP GSO datagram")
		}
		if !gso || s.Packets <= s.RDMAFrames {
			t.Errorf("%s: no GSO datagram split: %d packets in %d RDMA frames, notes %v", what, s.Packets, s.RDMAFrames, s.Notes)
		}
		if dropped == 0 {
			writes, gaps := 0, 0
			for _, f := range s.Flows {
				writes += f.Messages["RDMA WRITE"]
				gaps += f.PSNGaps
			}
			if writes != 200 || gaps != 0 {
				t.Errorf("%s: %d RDMA WRITE messages (want 200), %d PSN gaps", what, writes, gaps)
			}
		}
		if _, err := exec.LookPath("tshark"); err == nil {
			out, err := exec.Command("tshark", "-r", capture, "-Y", "infiniband").Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			if n := strings.Count(string(out), "\n"); n != s.RDMAFrames {
				t.Errorf("%s: %d RDMA frames, tshark finds %d infiniband frames", what, s.RDMAFrames, n)
			}
		}
	}
}
