package verbsdev_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
)

// mckeyScript runs two mckey receivers (devices on $NET.1 and $NET.2) and one
// sender ($NET.3) on group $GROUP through `softrdma run`, each with
// $COUNT messages of 200 bytes; with CAPTURE=1 it first brings lo up and
// starts tcpdump on it (in the network namespace the test made), and stops it
// at the end. A receiver's join is done when its library says the program
// took the MULTICAST_JOIN event (SOFTRDMA_DEBUG): the sender starts then, so
// that no message goes out before both receivers are members; a receiver
// that exits before it joined ends the script. Each program is bounded by
// timeout(1).
const mckeyScript = `set -e
if [ "$CAPTURE" = 1 ]; then
  ip link set lo up
  tcpdump -i lo -U -B 32768 -s 0 -w lo.pcap 'udp port 4791 or udp port 9' 2>tcpdump.log &
  tcpdump=$!
  n=0; until grep -q 'listening on' tcpdump.log; do n=$((n+1)); [ $n -lt 1000 ] || exit 3; sleep 0.01; done
fi
for i in 1 2; do
  SOFTRDMA_DEBUG=1 timeout 120 "$SOFTRDMA" run --device roce:$NET.$i -- mckey -m $GROUP -b $NET.$i -C $COUNT -S 200 >r$i.log 2>&1 &
  eval r$i=\$!
done
n=0; until grep -qs MULTICAST_JOIN r1.log && grep -qs MULTICAST_JOIN r2.log; do
  n=$((n+1)); [ $n -lt 3000 ] || exit 5
  kill -0 $r1 2>/dev/null && kill -0 $r2 2>/dev/null || exit 6 # a receiver failed before it joined
  sleep 0.01
done
SOFTRDMA_DEBUG=1 timeout 120 "$SOFTRDMA" run --device roce:$NET.3 -- mckey -m $GROUP -b $NET.3 -s -C $COUNT -S 200 >s.log 2>&1
wait $r1
wait $r2
if [ "$CAPTURE" = 1 ]; then
  bash -c "echo softrdma-capture-end >/dev/udp/$NET.1/9"
  n=0; until grep -qa softrdma-capture-end lo.pcap; do n=$((n+1)); [ $n -lt 1000 ] || exit 4; sleep 0.01; done
  kill -INT $tcpdump
  wait
fi
`

// runMckey runs mckeyScript in dir (see there); it fails the test unless all
// three programs succeed and each receiver says its count of messages
// arrived ("data transfers complete": mckey's receiver polls its CQ until
// it has -C completions).
func runMckey(t *testing.T, dir string, wrap []string, env ...string) {
	t.Helper()
	lib := buildLib(t)
	needTools(t, "mckey", "bash", "timeout")
	softrdma := softrdmaTree(t, lib)
	args := append(wrap, "bash", "-c", mckeyScript)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(t, "SOFTRDMA="+softrdma), env...)
	out, err := cmd.CombinedOutput()
	logs := func() string {
		var b strings.Builder
		for _, f := range []string{"r1.log", "r2.log", "s.log", "tcpdump.log"} {
			l, _ := os.ReadFile(filepath.Join(dir, f))
			b.WriteString("--- " + f + "\n" + string(l))
		}
		return b.String()
	}
	if err != nil {
		t.Fatalf("mckey: %v\n%s\n%s", err, out, logs())
	}
	for _, f := range []string{"r1.log", "r2.log", "s.log"} {
		l, _ := os.ReadFile(filepath.Join(dir, f))
		o := string(l)
		if !strings.Contains(o, "mckey: joined dgid: ::ffff:") || !strings.Contains(o, "data transfers complete") || !strings.Contains(o, "return status 0") {
			t.Errorf("%s: mckey did not complete:\n%s", f, logs())
		}
		if strings.Contains(o, "not implemented") {
			t.Errorf("%s: a call was refused:\n%s", f, o)
		}
	}
}

// TestMckey runs rdma-core's mckey, unmodified, with every end on softrdma's
// libraries through softrdma run: two receivers on their own devices and one
// sender join a random IPv4 group (rdma_resolve_addr of the group,
// rdma_join_multicast_ex as a full member: MULTICAST_JOIN with the
// IPv4-mapped MGID, QPN 0xFFFFFF and RDMA_UDP_QKEY, ibv_create_ah from it)
// on 127.X.Y.1-3; the sender's 30 SEND_WITH_IMMs to the group each reach
// both receivers, who exit only once they have all 30 completions.
func TestMckey(t *testing.T) {
	net3 := randomNet()
	group := fmt.Sprintf("239.%d.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250), 1+rand.IntN(250))
	runMckey(t, t.TempDir(), nil, "NET="+strings.TrimSuffix(net3, "."), "GROUP="+group, "COUNT=30", "CAPTURE=0")
}

// TestMckeyCapture is TestMckey in a network namespace of its own, on lo
// (which carries IPv4 multicast there too), captured with tcpdump -i lo: the
// capture decodes with no error in softrdma decode (every ICRC verified) and
// holds the sender's messages, each a UD SEND with immediate to QPN
// 0xFFFFFF.
func TestMckeyCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: tcpdump and a network namespace")
	}
	for _, tool := range []string{"tcpdump", "unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // tcpdump may drop to its own user
		t.Fatal(err)
	}
	runMckey(t, dir, []string{"unshare", "-n"}, "NET=127.0.0", "GROUP=239.1.2.3", "COUNT=30", "CAPTURE=1")
	f, err := os.Open(filepath.Join(dir, "lo.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := decode.Run(f, io.Discard, decode.Options{Flows: true, Summary: true})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(res.Errors) != 0 {
		t.Errorf("decode: %d RDMA frames, %d errors: %v", res.RDMAFrames, len(res.Errors), res.Errors)
	}
	// Every message is one packet on the wire (tcpdump -i lo sees each
	// datagram once, whatever number of members gets it).
	if res.RDMAFrames < 30 {
		t.Errorf("decode: %d RDMA frames, want at least the 30 sent to the group", res.RDMAFrames)
	}
	t.Logf("%d frames, %d RDMA frames, 0 errors", res.Frames, res.RDMAFrames)
}

// TestAttachMcast (testdata/mcast.c) calls ibv_attach_mcast and
// ibv_detach_mcast as a program does, on a RoCE and an iWARP device of one
// process: the kernel's errnos for an RC QP, a unicast GID and a detach of
// a QP not attached (EINVAL), a second attach of the same QP (0), iWARP
// (EOPNOTSUPP); then a UD QP of the RoCE device sends to the group and the
// attached QP gets every message (through the device's own member socket:
// IP_MULTICAST_LOOP), the one that detached gets none.
func TestAttachMcast(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "mcast")
	net3 := randomNet()
	group := fmt.Sprintf("239.%d.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250), 1+rand.IntN(250))
	out, errOut, err := runBounded(t, lib, "roce:"+net3+"1;iwarp:"+net3+"1", time.Minute, prog, net3+"1", group)
	if err != nil || strings.Contains(out, "BAD") || !strings.Contains(out, "bad: 0") {
		t.Fatalf("mcast: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
}

// TestJoinBeforeQP (testdata/cmjoin.c): rdma_join_multicast, then
// rdma_create_qp, then the MULTICAST_JOIN event: taking the event attaches
// the QP made after the join, as rdma-core's ucma_process_join does; the
// event's context, QPN, Q_Key and MGID; leave detaches, a second leave is
// EADDRNOTAVAIL.
func TestJoinBeforeQP(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmjoin")
	net3 := randomNet()
	group := fmt.Sprintf("239.%d.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250), 1+rand.IntN(250))
	out, errOut, err := runBounded(t, lib, "roce:"+net3+"1", time.Minute, prog, net3+"1", group)
	if err != nil || strings.Contains(out, "BAD") || !strings.Contains(out, "bad: 0") {
		t.Fatalf("cmjoin: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
}
