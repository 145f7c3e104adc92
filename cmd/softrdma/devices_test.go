package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/devinfo"
	"github.com/softrdma/softrdma/roce"
)

// devicesJSON runs softrdma devices --json ARGS in this process.
func devicesJSON(t *testing.T, args ...string) []devinfo.Device {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := runCommand(append([]string{"devices", "--json"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("devices %q: exit %d, %s", args, code, stderr.String())
	}
	var v struct{ Devices []devinfo.Device }
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
		t.Fatalf("devices --json: %v\n%s", err, stdout.String())
	}
	return v.Devices
}

// TestDevicesFlags: --device SPECs are described in order, named as
// SOFTRDMA_DEVICES names them; every JSON key is snake_case; -v adds the
// attributes; a bad SPEC is an error naming it; an argument is refused.
func TestDevicesFlags(t *testing.T) {
	devs := devicesJSON(t, "--device", "roce:127.0.0.1", "--device", "iwarp:127.0.0.1", "--device", "roce:127.0.0.2,name=right")
	var names []string
	for _, d := range devs {
		names = append(names, d.Name+"="+d.Spec)
		if d.Attributes != nil {
			t.Errorf("%s: attributes without -v", d.Name)
		}
	}
	if want := "sr_roce0=roce:127.0.0.1 sr_iwarp0=iwarp:127.0.0.1 right=roce:127.0.0.2"; strings.Join(names, " ") != want {
		t.Errorf("devices %v, want %s", names, want)
	}
	if r := devs[2]; r.Transport != "roce" || r.Address != "127.0.0.2" || len(r.GIDs) < 2 || r.GIDs[1].GID != "::ffff:127.0.0.2" || r.GIDs[1].Type != "RoCE v2" {
		t.Errorf("right: %+v", r)
	}
	// 127.0.0.2 is on no interface's list, but Linux routes it over lo, as
	// the device's MTU (lo's) and perf's "Device: lo" say.
	if lo := roce.LoopbackInterface(); lo != nil && (devs[2].Interface != lo.Name || devs[2].InterfaceMTU != lo.MTU) {
		t.Errorf("right: interface %q (mtu %d), want %s (mtu %d)", devs[2].Interface, devs[2].InterfaceMTU, lo.Name, lo.MTU)
	}
	var out, errb bytes.Buffer
	runCommand([]string{"devices", "-v", "--json", "--device", "roce:127.0.0.1"}, &out, &errb)
	for _, m := range regexp.MustCompile(`"([^"]+)":`).FindAllStringSubmatch(out.String(), -1) {
		if !regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`).MatchString(m[1]) {
			t.Errorf("JSON key %q is not snake_case", m[1])
		}
	}
	if !strings.Contains(out.String(), `"max_qp": 1048560`) {
		t.Errorf("devices -v --json: no max_qp in\n%s", out.String())
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--device", "roce:127.0.0.1,mtu=9000"}, 1, `softrdma devices: device spec "roce:127.0.0.1,mtu=9000": unknown field "mtu" (want backend, iface, kernel-addr or name)`},
		{[]string{"roce:127.0.0.1"}, 2, `softrdma devices: takes no arguments, got ["roce:127.0.0.1"] (a device is --device SPEC)`},
	} {
		out.Reset()
		errb.Reset()
		code := runCommand(append([]string{"devices"}, c.args...), &out, &errb)
		if first, _, _ := strings.Cut(errb.String(), "\n"); code != c.code || first != c.err {
			t.Errorf("devices %q: exit %d, stderr %q; want %d, %q", c.args, code, errb.String(), c.code, c.err)
		}
	}
}

// TestDevicesAgreeWithDevinfo runs softrdma devices and, under softrdma run
// (this test binary as softrdma, the libraries built here with make lib),
// Debian's ibv_devinfo -v, for the same configuration given four ways: a
// --device list, SOFTRDMA_DEVICES, a config file and the defaults (the
// host's interfaces). For each device they must agree on the name, node
// GUID, transport, MTUs and the GID table (ibv_devinfo prints no GIDs for an
// iWARP device, as for the kernel's siw0 in capi/verbsdev/testdata/kernel).
func TestDevicesAgreeWithDevinfo(t *testing.T) {
	for _, tool := range []string{"make", "gcc", "ibv_devinfo"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/deps.sh installs gcc, libibverbs-dev, ibverbs-utils)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("needs rdma-core's headers (libibverbs-dev, librdmacm-dev; scripts/deps.sh)")
	}
	lib := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", filepath.Join("..", ".."), "lib", "LIBDIR="+lib).CombinedOutput(); err != nil {
		t.Fatalf("make lib: %v\n%s", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "devices")
	if err := os.WriteFile(cfg, []byte("# two devices\nroce:127.0.0.3,name=cfg_roce\niwarp:127.0.0.3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const list = "roce:127.0.0.1;iwarp:127.0.0.1;roce:127.0.0.2,name=right"
	tests := []struct {
		name string
		args []string // softrdma's flags: devices', then run's
		env  []string
	}{
		{"--device", []string{"--device", "roce:127.0.0.1", "--device", "iwarp:127.0.0.1", "--device", "roce:127.0.0.2,name=right"}, nil},
		{"SOFTRDMA_DEVICES", nil, []string{"SOFTRDMA_DEVICES=" + list}},
		{"config file", nil, []string{"SOFTRDMA_CONFIG=" + cfg}},
		{"defaults", nil, []string{"XDG_CONFIG_HOME=" + t.TempDir()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "defaults" {
				if _, err := os.Stat("/etc/softrdma/devices"); err == nil {
					t.Skip("/etc/softrdma/devices exists: not the defaults")
				}
			}
			env := append(os.Environ(), mainEnv+"=1", "SOFTRDMA_DEVICES=", "SOFTRDMA_CONFIG=", "SOFTRDMA_DEBUG=")
			env = append(env, tt.env...)
			softrdma := func(args ...string) string {
				cmd := exec.Command(os.Args[0], args...)
				cmd.Env = env
				var o, e bytes.Buffer
				cmd.Stdout, cmd.Stderr = &o, &e
				if err := cmd.Run(); err != nil {
					t.Fatalf("softrdma %q: %v\n%s%s", args, err, o.String(), e.String())
				}
				return o.String()
			}
			var v struct{ Devices []devinfo.Device }
			out := softrdma(append([]string{"devices", "--json"}, tt.args...)...)
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("devices --json: %v\n%s", err, out)
			}
			info := softrdma(append(append([]string{"run", "--lib", lib}, tt.args...), "--", "ibv_devinfo", "-v")...)
			blocks := strings.Split(info, "hca_id:\t")[1:]
			if len(blocks) != len(v.Devices) || len(blocks) == 0 {
				t.Fatalf("ibv_devinfo lists %d devices, softrdma devices %d:\n%s\n%s", len(blocks), len(v.Devices), info, out)
			}
			for i, d := range v.Devices {
				b := blocks[i]
				mtu := func(n int) string {
					return fmt.Sprintf("%d (%d)", n, map[int]int{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}[n])
				}
				transport := map[string]string{"roce": "InfiniBand (0)", "iwarp": "iWARP (1)"}[d.Transport]
				want := []string{
					d.Name + "\n",
					"\tnode_guid:\t\t\t" + d.NodeGUID + "\n",
					"\ttransport:\t\t\t" + transport + "\n",
					"\t\t\tstate:\t\t\tPORT_" + d.State + " (4)\n",
					"\t\t\tmax_mtu:\t\t" + mtu(d.MaxMTU) + "\n",
					"\t\t\tactive_mtu:\t\t" + mtu(d.ActiveMTU) + "\n",
					"\t\t\tlink_layer:\t\t" + d.LinkLayer + "\n",
					fmt.Sprintf("\t\t\tgid_tbl_len:\t\t%d\n", d.GIDTableLen),
				}
				var gids []string
				if d.Transport == "roce" {
					for _, g := range d.GIDs {
						gids = append(gids, fmt.Sprintf("\t\t\tGID[%3d]:\t\t%s, %s", g.Index, g.GID, g.Type))
					}
				}
				for _, w := range want {
					if !strings.Contains(b, w) && !strings.HasPrefix(b, w) {
						t.Errorf("%s: ibv_devinfo -v has no %q:\n%s", d.Name, w, b)
					}
				}
				var got []string
				for _, l := range strings.Split(b, "\n") {
					if strings.HasPrefix(l, "\t\t\tGID[") {
						got = append(got, l)
					}
				}
				if strings.Join(got, "\n") != strings.Join(gids, "\n") {
					t.Errorf("%s: GIDs: ibv_devinfo -v\n%s\nsoftrdma devices\n%s", d.Name, strings.Join(got, "\n"), strings.Join(gids, "\n"))
				}
			}
		})
	}
}
