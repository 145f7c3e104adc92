package verbsdev_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/decode"
)

// libCaptureScript runs in a fresh network namespace (unshare -n): PROGRAM
// ARGS ("$@") as a server on softrdma's libraries with a RoCE device on
// 127.0.0.1 and as its client on 127.0.0.2, watched by tcpdump -i lo. (An
// address added to lo would not do: the GID table is the interface's, as
// rxe's, and both ends' GID index 1 would be 127.0.0.1; 127.0.0.2 is on no
// interface, its GID index 1 is its own.) The client starts once the server listens on the tools'
// out-of-band port 18515 (0x4853; a C program's stdout sits in its buffer);
// after the run a marker datagram (UDP port 9) is sent, and tcpdump stopped
// once its file holds the marker, so that it loses none of the run's last
// frames still in its buffer.
const libCaptureScript = `set -e
ip link set lo up
tcpdump -i lo -U -B 32768 -s 0 -w lo.pcap 'udp port 4791 or udp port 9' 2>tcpdump.log &
tcpdump=$!
n=0; until grep -q 'listening on' tcpdump.log; do n=$((n+1)); [ $n -lt 1000 ] || exit 3; sleep 0.01; done
LD_LIBRARY_PATH="$LIB" SOFTRDMA_DEVICES=roce:127.0.0.1 timeout 120 "$@" >server.log 2>&1 &
server=$!
n=0; until awk '$4 == "0A" && $2 ~ /:4853$/ {f=1} END {exit !f}' /proc/net/tcp; do
  n=$((n+1)); [ $n -lt 3000 ] || exit 5; sleep 0.01
done
LD_LIBRARY_PATH="$LIB" SOFTRDMA_DEVICES=roce:127.0.0.2 timeout 120 "$@" 127.0.0.1 >client.log 2>&1
wait $server
bash -c 'echo softrdma-capture-end >/dev/udp/127.0.0.1/9'
n=0; until grep -qa softrdma-capture-end lo.pcap; do n=$((n+1)); [ $n -lt 1000 ] || exit 4; sleep 0.01; done
kill -INT $tcpdump
wait
`

var tcpdumpDroppedRE = regexp.MustCompile(`([0-9]+) packets dropped by kernel`)

// TestLoopbackCapture runs Debian's unmodified ibv_rc_pingpong,
// ibv_ud_pingpong, ib_write_bw, ib_read_bw, ib_send_lat and ib_atomic_bw with
// both ends on softrdma's libraries, between 127.0.0.1 and 127.0.0.2 in a network
// namespace of its own, and captures them with tcpdump -i lo. Each capture
// decodes with no error in softrdma decode (every ICRC verified; the UDP
// backend's GSO datagrams split), holds the run's messages (unless tcpdump
// dropped frames), and, with tshark installed, has no frame tshark calls
// malformed and as many InfiniBand frames as decode's RDMA frames. Every
// packet leaves with the IPv4 TTL and TOS rxe puts on its own (64 and 0)
// whatever hop limit the program put in its address (perftest asks for 255,
// the pingpongs for 1): the kernel's verbs replace it with the route's.
func TestLoopbackCapture(t *testing.T) {
	lib := buildLib(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: tcpdump and a network namespace")
	}
	for _, tool := range []string{"tcpdump", "unshare", "ip", "bash", "awk", "ib_write_bw"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	for _, tc := range []struct {
		args    []string
		message string // decode's message name, at least iters of them
		iters   int
	}{
		{[]string{"ibv_rc_pingpong", "-d", "sr_roce0", "-g", "1", "-n", "100", "-c"}, "SEND", 200},
		{[]string{"ibv_ud_pingpong", "-d", "sr_roce0", "-g", "1", "-n", "100", "-s", "1000"}, "SEND", 200},
		{[]string{"ib_write_bw", "-d", "sr_roce0", "-x", "1", "-F", "-n", "100", "-s", "65536"}, "RDMA WRITE", 100},
		{[]string{"ib_read_bw", "-d", "sr_roce0", "-x", "1", "-F", "-n", "100", "-s", "16384"}, "RDMA READ", 100},
		{[]string{"ib_send_lat", "-d", "sr_roce0", "-x", "1", "-F", "-n", "100", "-s", "64"}, "SEND", 200},
		{[]string{"ib_atomic_bw", "-d", "sr_roce0", "-x", "1", "-F", "-n", "100"}, "FetchAdd", 100},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			if _, err := exec.LookPath(tc.args[0]); err != nil {
				t.Skipf("needs %s", tc.args[0])
			}
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o777); err != nil { // tcpdump may drop to its own user
				t.Fatal(err)
			}
			cmd := exec.Command("unshare", append([]string{"-n", "sh", "-c", libCaptureScript, "sh"}, tc.args...)...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "LIB="+lib, "SOFTRDMA_DEBUG=")
			out, err := cmd.CombinedOutput()
			logs := func() string {
				var b strings.Builder
				for _, f := range []string{"server.log", "client.log", "tcpdump.log"} {
					l, _ := os.ReadFile(filepath.Join(dir, f))
					b.WriteString("--- " + f + "\n" + string(l))
				}
				return b.String()
			}
			if err != nil {
				t.Fatalf("capture: %v\n%s\n%s", err, out, logs())
			}
			tlog, _ := os.ReadFile(filepath.Join(dir, "tcpdump.log"))
			dropped := -1
			if m := tcpdumpDroppedRE.FindSubmatch(tlog); m != nil {
				dropped, _ = strconv.Atoi(string(m[1]))
			}
			capture := filepath.Join(dir, "lo.pcap")
			f, err := os.Open(capture)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res, err := decode.Run(f, io.Discard, decode.Options{Flows: true, Summary: true})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if len(res.Errors) != 0 || res.RDMAFrames == 0 {
				t.Errorf("decode: %d RDMA frames, %d errors: %v\n%s", res.RDMAFrames, len(res.Errors), res.Errors, logs())
			}
			messages := 0
			for _, fl := range res.Flows {
				messages += fl.Messages[tc.message]
			}
			if dropped == 0 && messages < tc.iters {
				t.Errorf("decode: %d %s messages, want at least %d", messages, tc.message, tc.iters)
			}
			t.Logf("%d frames, %d RDMA frames, %d packets, %d %s messages, 0 errors; tcpdump dropped %d",
				res.Frames, res.RDMAFrames, res.Packets, messages, tc.message, dropped)
			checkIPv4Header(t, capture)
			tsharkCheck(t, capture, res.RDMAFrames)
		})
	}
}

// rxeTTL and rxeTOS are the IPv4 TTL and TOS on every frame of rxe's in the
// reference captures: the kernel's ib_resolve_eth_dmac overwrites the address
// handle's hop limit with the route's (net.ipv4.ip_default_ttl, 64), and the
// tools leave the traffic class 0.
const rxeTTL, rxeTOS = 64, 0

// checkIPv4Header checks the IPv4 TTL and TOS of every RoCEv2 frame of the
// capture (Ethernet, as tcpdump -i lo writes).
func checkIPv4Header(t *testing.T, capture string) {
	t.Helper()
	f, err := os.Open(capture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]int{}
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(data, r.LinkType(), gopacket.NoCopy)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil || udp.DstPort != 4791 {
			continue
		}
		n++
		if ip.TTL != rxeTTL || ip.TOS != rxeTOS {
			bad["TTL "+strconv.Itoa(int(ip.TTL))+" TOS "+strconv.Itoa(int(ip.TOS))]++
		}
	}
	if n == 0 || len(bad) > 0 {
		t.Errorf("of %d RoCEv2 frames, these have another IPv4 TTL or TOS than rxe's %d and %d: %v", n, rxeTTL, rxeTOS, bad)
	}
}

// tsharkCheck checks with tshark, when it is installed, that no frame of the
// capture is malformed and that it dissects rdma frames as InfiniBand. The
// RPC-over-RDMA heuristic is off: it reads random payloads as RPC.
func tsharkCheck(t *testing.T, capture string, rdma int) {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Log("tshark not installed: its checks skipped")
		return
	}
	count := func(filter string) int {
		var o, e bytes.Buffer
		cmd := exec.Command("tshark", "-r", capture, "--disable-protocol", "rpcordma", "-Y", filter, "-T", "fields", "-e", "frame.number")
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("tshark: %v\n%s", err, e.String())
		}
		return strings.Count(o.String(), "\n")
	}
	if n := count("_ws.malformed"); n > 0 {
		t.Errorf("tshark finds %d malformed frames", n)
	}
	if n := count("infiniband"); n != rdma {
		t.Errorf("tshark dissects %d frames as InfiniBand, decode finds %d RDMA frames", n, rdma)
	}
}
