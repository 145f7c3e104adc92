package verbsdev_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// devinfoField is one field of ibv_devinfo's output: its key (the text before
// the first ':', with a count when the key repeats: "max_tso#2") and value;
// lines without a key (the flag names under device_cap_flags, "...not
// supported") are appended to the value of the field before them.
type devinfoField struct{ key, value string }

// parseDevinfo splits ibv_devinfo's output into its fields, in order.
func parseDevinfo(out string) []devinfoField {
	var fs []devinfoField
	seen := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok || strings.Contains(k, " ") && !strings.HasPrefix(k, "GID[") {
			if len(fs) == 0 {
				fs = append(fs, devinfoField{"", l})
			} else {
				fs[len(fs)-1].value += " | " + l
			}
			continue
		}
		seen[k]++
		if seen[k] > 1 {
			k = fmt.Sprintf("%s#%d", k, seen[k])
		}
		fs = append(fs, devinfoField{k, strings.TrimSpace(v)})
	}
	return fs
}

// kernelDiffs are the only fields in which softrdma's devices may differ from
// the kernel's rxe0 and siw0 of testdata/kernel, each with softrdma's value
// and why it must differ. Anything else that differs fails the test, and so
// does one of these if its value changes (update it here, with the reason).
var kernelDiffs = map[string]map[string]struct{ value, why string }{
	"ibv_devinfo-v-rxe0.txt": {
		"device_cap_flags": {"0x01223c66 | BAD_PKEY_CNTR | BAD_QKEY_CNTR | CHANGE_PHY_PORT | UD_AV_PORT_ENFORCE | PORT_ACTIVE_EVENT | SYS_IMAGE_GUID | RC_RNR_NAK_GEN | SRQ_RESIZE | MEM_WINDOW | MEM_MGT_EXTENSIONS | MEM_WINDOW_TYPE_2B",
			"no AUTO_PATH_MIG (the engine has no alternate path)"},
		"device_cap_flags_ex": {"0x1223C66", "the same bits as device_cap_flags"},
	},
}

// TestKernelDevinfo runs Debian's ibv_devices and ibv_devinfo (-v) on the
// library in a network namespace whose eth0 is the interop guest's (MAC,
// addresses, MTU), with devices named rxe0 and siw0 on it, and compares their
// output with what the kernel's rxe and siw printed there (testdata/kernel):
// field by field, identical (names, GUIDs and GIDs included, since the
// interface is the same) but for kernelDiffs. Transport, link layer, port
// state, MTUs, vendor and part id, firmware version, page size cap, every
// limit, capability flags, pkey and GID table lengths, the GID table (0: the
// link-local GID of the MAC, 1: the IPv4-mapped address, 2: the IPv6 one,
// all RoCE v2; none printed for siw). Needs root for the namespace.
func TestKernelDevinfo(t *testing.T) {
	lib := buildLib(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace with the interop guest's eth0")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	ns := fmt.Sprintf("srdevinfo%d", os.Getpid())
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sh("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1").CombinedOutput(); err != nil {
		t.Skipf("needs veth interfaces: ip link add type veth: %v: %s", err, bytes.TrimSpace(out))
	}
	for _, c := range [][]string{
		{"link", "set", "eth0", "address", "52:54:00:78:00:01", "mtu", "1500"},
		{"addr", "add", "10.77.0.11/24", "dev", "eth0"},
		{"addr", "add", "fd77::11/64", "dev", "eth0", "nodad"},
		{"link", "set", "eth1", "up"},
		{"link", "set", "eth0", "up"},
	} {
		sh(append([]string{"ip", "-n", ns}, c...)...)
	}
	const list = "roce:10.77.0.11,name=rxe0;iwarp:10.77.0.11,name=siw0"
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "SOFTRDMA_DEVICES="+list, "SOFTRDMA_DEBUG=")
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil || e.Len() > 0 {
			t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, o.String(), e.String())
		}
		return o.String()
	}
	for _, c := range []struct {
		file string
		args []string
	}{
		{"ibv_devices.txt", []string{"ibv_devices"}},
		{"ibv_devinfo.txt", []string{"ibv_devinfo"}},
		{"ibv_devinfo-v-rxe0.txt", []string{"ibv_devinfo", "-v", "-d", "rxe0"}},
		{"ibv_devinfo-v-siw0.txt", []string{"ibv_devinfo", "-v", "-d", "siw0"}},
	} {
		kb, err := os.ReadFile(filepath.Join("testdata", "kernel", c.file))
		if err != nil {
			t.Fatal(err)
		}
		kernel, ours := parseDevinfo(string(kb)), parseDevinfo(run(c.args...))
		allowed := kernelDiffs[c.file]
		oi := map[string]string{}
		for _, f := range ours {
			oi[f.key] = f.value
		}
		ki := map[string]bool{}
		for _, f := range kernel {
			ki[f.key] = true
			v, ok := oi[f.key]
			switch {
			case !ok:
				t.Errorf("%s: %s: no %q (the kernel's: %q)", c.file, strings.Join(c.args, " "), f.key, f.value)
			case v == f.value:
				if a, ok := allowed[f.key]; ok {
					t.Errorf("%s: %s is now the kernel's, %q: drop it from kernelDiffs (%s)", c.file, f.key, v, a.why)
				}
			case allowed[f.key].value == v:
				t.Logf("%s: %s: %q, the kernel's %q: %s", c.file, f.key, v, f.value, allowed[f.key].why)
			default:
				t.Errorf("%s: %s: %s: %q, the kernel's %q", c.file, strings.Join(c.args, " "), f.key, v, f.value)
			}
		}
		for _, f := range ours {
			if !ki[f.key] {
				t.Errorf("%s: %s: %s: %q, which the kernel does not print", c.file, strings.Join(c.args, " "), f.key, f.value)
			}
		}
		for i := 0; i < len(kernel) && i < len(ours); i++ {
			if kernel[i].key != ours[i].key {
				t.Errorf("%s: field %d is %q, the kernel's %q: not in the kernel's order", c.file, i, ours[i].key, kernel[i].key)
				break
			}
		}
	}
}
