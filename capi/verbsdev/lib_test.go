package verbsdev_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/softrdma/softrdma/capi/verbsdev"
	"github.com/softrdma/softrdma/devspec"
)

// built is the library that buildLib built once for all the tests, in a
// directory TestMain removes.
var built struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildLib builds lib/libibverbs.so.1 into a temporary directory with `make lib`
// (cgo, rdma-core's headers), once, or skips the test with one line when gcc,
// the headers or rdma-core's tools are missing (scripts/deps.sh installs them).
func buildLib(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"make", "gcc", "ibv_devices", "ibv_devinfo", "ibv_rc_pingpong"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/deps.sh installs gcc, libibverbs-dev, ibverbs-utils)", tool)
		}
	}
	for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
		if _, err := os.Stat(h); err != nil {
			t.Skipf("needs rdma-core's headers (%s: libibverbs-dev, librdmacm-dev; scripts/deps.sh installs them)", h)
		}
	}
	built.once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			built.err = err
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "softrdma-lib"); built.err != nil {
			return
		}
		cmd := exec.Command("make", "-s", "-C", root, "lib", "LIBDIR="+built.dir)
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("make lib: %v\n%s", built.err, built.out)
	}
	return built.dir
}

// run runs a program with the library and the devices of list.
func run(t *testing.T, lib, list string, prog string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+list, "SOFTRDMA_DEBUG=")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// devinfoBlocks splits ibv_devinfo's output into one block per hca_id.
func devinfoBlocks(out string) map[string]string {
	blocks := map[string]string{}
	for _, b := range strings.Split(out, "hca_id:\t")[1:] {
		name, _, _ := strings.Cut(b, "\n")
		blocks[name] = b
	}
	return blocks
}

var mtuName = map[int]string{1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}

// TestStockTools runs Debian's own ibv_devices and ibv_devinfo, unmodified, on
// softrdma's libibverbs.so.1 and checks they list and describe the devices
// SOFTRDMA_DEVICES names as rxe and siw devices look: names, node GUIDs,
// transport, port ACTIVE, link layer Ethernet, the MTUs, the GID table with
// the IPv4-mapped address at index 1 (RoCE v2). A C program built against
// rdma-core's headers checks the inline paths (ibv_query_port through the
// extended context, ibv_query_gid_ex), ibv_query_pkey, a PD, and that a verb
// not implemented fails with EOPNOTSUPP.
func TestStockTools(t *testing.T) {
	lib := buildLib(t)
	const list = "roce:127.0.0.1;iwarp:127.0.0.1;roce:127.0.0.2,name=right"
	specs, err := devspec.ParseList(list)
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]*verbsdev.Device{}
	for _, s := range specs {
		if devs[s.Name], err = verbsdev.Describe(s); err != nil {
			t.Fatal(err)
		}
	}

	out, errOut, err := run(t, lib, list, "ibv_devices")
	if err != nil {
		t.Fatalf("ibv_devices: %v\n%s%s", err, out, errOut)
	}
	for _, s := range specs {
		want := fmt.Sprintf("    %-16s\t%016x\n", s.Name, devs[s.Name].NodeGUID())
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devices: no line %q in\n%s", want, out)
		}
	}

	out, errOut, err = run(t, lib, list, "ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s%s", err, out, errOut)
	}
	blocks := devinfoBlocks(out)
	for _, s := range specs {
		d := devs[s.Name]
		b, ok := blocks[s.Name]
		if !ok {
			t.Errorf("ibv_devinfo -v: no hca_id %s in\n%s", s.Name, out)
			continue
		}
		g := d.NodeGUID()
		active := verbsdev.MTUEnum(d.ActiveMTU())
		want := []string{
			fmt.Sprintf("node_guid:\t\t\t%04x:%04x:%04x:%04x\n", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff),
			fmt.Sprintf("vendor_id:\t\t\t0x%04x\n", d.Vendor()),
			"phys_port_cnt:\t\t\t1\n",
			"state:\t\t\tPORT_ACTIVE (4)\n",
			fmt.Sprintf("active_mtu:\t\t%s (%d)\n", mtuName[active], active),
			"link_layer:\t\tEthernet\n",
			fmt.Sprintf("gid_tbl_len:\t\t%d\n", d.GIDTableLen()),
			fmt.Sprintf("max_qp:\t\t\t\t%d\n", d.Engine.MaxQP),
		}
		if s.Transport == devspec.RoCE {
			want = append(want,
				"transport:\t\t\tInfiniBand (0)\n",
				"max_mtu:\t\t4096 (5)\n",
				"atomic_cap:\t\t\tATOMIC_HCA (1)\n",
				fmt.Sprintf("GID[  0]:\t\t%s, RoCE v2\n", d.GIDs[0]),
				fmt.Sprintf("GID[  1]:\t\t::ffff:%s, RoCE v2\n", s.Addr))
		} else {
			want = append(want, "transport:\t\t\tiWARP (1)\n")
		}
		for _, w := range want {
			if !strings.Contains(b, w) {
				t.Errorf("ibv_devinfo -v, %s: no %q in\n%s", s.Name, w, b)
			}
		}
	}

	// One device by name; an unknown name is the tool's own error.
	out, _, err = run(t, lib, list, "ibv_devinfo", "-d", "right")
	if err != nil || len(devinfoBlocks(out)) != 1 || !strings.Contains(out, "hca_id:\tright\n") {
		t.Errorf("ibv_devinfo -d right: %v\n%s", err, out)
	}
	_, errOut, err = run(t, lib, list, "ibv_devinfo", "-d", "nosuch")
	if err == nil || !strings.Contains(errOut, "IB device 'nosuch' wasn't found") {
		t.Errorf("ibv_devinfo -d nosuch: %v, stderr %q", err, errOut)
	}

	// A bad list: no devices, and a message naming the spec and the field.
	out, errOut, err = run(t, lib, "roce:127.0.0.1,backend=rdma", "ibv_devices")
	if err != nil || strings.Contains(out, "sr_roce0") ||
		!strings.Contains(errOut, `SOFTRDMA_DEVICES: device spec "roce:127.0.0.1,backend=rdma": backend "rdma"`) {
		t.Errorf("ibv_devices with a bad list: %v\nstdout %q\nstderr %q", err, out, errOut)
	}

	// The C program.
	prog := compile(t, lib, "query")
	// Addresses of their own: the PD opens the device's UDP port. On lo's
	// route, so the active MTU derives from lo's 65536: 4096 (enum 5).
	const qlist = "roce:127.0.0.3;iwarp:127.0.0.3"
	out, errOut, err = run(t, lib, qlist, prog)
	if err != nil {
		t.Fatalf("query: %v\n%s%s", err, out, errOut)
	}
	for _, w := range []string{
		"sr_roce0: port 1 rc=0 state=4 active_mtu=5 link_layer=2 gid_tbl_len=1024\n",
		"sr_roce0: port 2 rc=22\n",
		"sr_roce0: gid_ex 1 rc=0 gid=::ffff:127.0.0.3 type=2\n",
		"sr_roce0: pkey 0 rc=0 pkey=0xffff\n",
		"sr_roce0: alloc_pd ok\n",
		"sr_roce0: stub import_pd NULL errno=95\n",
		"sr_roce0: create_qp inline 0: ok errno=0 max_inline_data=16 max_send_sge=1\n",
		"sr_roce0: create_qp inline 81: ok errno=0 max_inline_data=81 max_send_sge=5\n",
		"sr_roce0: dealloc_pd rc=0\n",
		"sr_roce0: close rc=0\n",
		"sr_iwarp0: port 1 rc=0 state=4 active_mtu=5 link_layer=2 gid_tbl_len=1\n",
		"sr_iwarp0: gid_ex 1 rc=22 gid= type=0\n",
		"sr_iwarp0: alloc_pd ok\n",
		"sr_iwarp0: create_qp inline 0: ok errno=0 max_inline_data=80 max_send_sge=1\n",
		"sr_iwarp0: create_qp inline 81: NULL errno=22 max_inline_data=0 max_send_sge=0\n",
		"sr_iwarp0: dealloc_pd rc=0\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("query: no %q in\n%s", w, out)
		}
	}
}

// TestSignals: a program with a SIGALRM handler installed without SA_ONSTACK,
// as perftest's for -D, finds every asynchronous signal it may take blocked on
// every thread of the library's Go runtime (so the kernel runs its handler on
// its own threads only, never on a goroutine stack, which killed perftest with
// "fatal error: fault"), and takes an interval timer's signal every 200 µs for
// half a second while it polls a CQ, its thread mostly inside the library's Go
// code, always on its own stack (the library blocks the signals while it runs
// Go code on the program's thread; perftest -D died of a goroutine stack its
// handler's frame had overwritten). The handler is installed with signal()
// once the library runs ("late", as perftest) or with sigaction() before the
// first verb ("early"). The library blocks the signals only when such a
// handler exists (libibverbs.so.1 wraps sigaction and signal): with none
// ("none") 100 ibv_query_device block nothing and SOFTRDMA_DEBUG says
// nothing; with one they block 100 times and SOFTRDMA_DEBUG says why.
// librdmacm.so.1 reads the same flag: 50 rdma_create_id and rdma_destroy_id
// block at each call with such a handler and never without.
func TestSignals(t *testing.T) {
	lib := buildLib(t)
	prog := gcc(t, "signals", "-rdynamic", filepath.Join(lib, "libibverbs.so.1"), filepath.Join(lib, "librdmacm.so.1"), "-ldl")
	for _, c := range []struct {
		mode, alarms, blocked, cmBlocked, debug string
	}{
		{"late", "taken", "100", "each call", "SIGALRM has a handler without SA_ONSTACK (installed with signal())"},
		{"early", "taken", "100", "each call", "SIGALRM has a handler without SA_ONSTACK (installed with sigaction())"},
		{"none", "none", "0", "never", ""},
	} {
		t.Run(c.mode, func(t *testing.T) {
			cmd := exec.Command(prog, c.mode)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"=roce:"+randomNet()+"1", "SOFTRDMA_DEBUG=1")
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			if err := cmd.Run(); err != nil {
				t.Fatalf("signals %s: %v\n%s%s", c.mode, err, o.String(), e.String())
			}
			out, errOut := o.String(), e.String()
			if !regexp.MustCompile(`threads besides main: [1-9][0-9]*, unblocked: 0\n`).MatchString(out) ||
				!strings.Contains(out, "alarms: "+c.alarms+", off the thread's stack: 0\n") ||
				!strings.Contains(out, "signals blocked in 100 ibv_query_device: "+c.blocked+" times\n") ||
				!strings.Contains(out, "signals blocked in 50 rdma_create_id and rdma_destroy_id: "+c.cmBlocked+"\n") {
				t.Errorf("signals %s:\n%s%s", c.mode, out, errOut)
			}
			said := strings.Contains(errOut, maskingPrefix)
			if c.debug == "" && said || c.debug != "" && !strings.Contains(errOut, c.debug) {
				t.Errorf("signals %s: SOFTRDMA_DEBUG said\n%s\nwant %q", c.mode, errOut, c.debug)
			}
		})
	}
}

// TestCompletionChannel (testdata/channel.c): one RC QP connected to itself
// over the library; the completion channel's fd honours O_NONBLOCK (EAGAIN
// with no event), poll() sees the event that ibv_req_notify_cq and a
// completion make, ibv_get_cq_event returns the CQ and its context, the SEND
// arrives, and ibv_destroy_comp_channel is EBUSY while a CQ uses the channel
// and succeeds after.
func TestCompletionChannel(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "channel")
	addr := "roce:" + randomNet() + "1"
	out, errOut, err := run(t, lib, addr, prog)
	if err != nil {
		t.Fatalf("channel: %v\n%s%s", err, out, errOut)
	}
	want := `destroy channel in use: EBUSY
no event yet: rc=-1 EAGAIN
connected to itself: rc=0
req_notify: rc=0
posted: rc=0
poll: 1
event: rc=0 cq=ours context=ours
completions: 2, success
received: through the wire and back
second QP: rc=0, 16 bytes of events pending
send CQ destroyed: 8 bytes pending
event: rc=0 cq=the receive CQ
receive CQ destroyed: 0 bytes pending, readable 0
destroy: 0 0 0 0
`
	if out != want {
		t.Errorf("channel printed\n%s%s\nwant\n%s", out, errOut, want)
	}
}
