package launch

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tree makes DIR/bin/softrdma, DIR/lib/libibverbs.so.1 (unless noLib),
// DIR/other/libibverbs.so.1, an executable DIR/path/prog and a plain file
// DIR/path/data, and returns DIR.
func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{
		{"bin/softrdma", 0o755}, {"lib/" + Library, 0o644}, {"other/" + Library, 0o644},
		{"path/prog", 0o755}, {"path/data", 0o644},
	} {
		p := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "bin/softrdma"), filepath.Join(dir, "path/softrdma")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPrepare(t *testing.T) {
	dir := tree(t)
	exe := filepath.Join(dir, "bin/softrdma")
	lib, other := filepath.Join(dir, "lib"), filepath.Join(dir, "other")
	path := filepath.Join(dir, "path")
	base := []string{"PATH=" + path, "HOME=" + dir, "KEEP=1"}
	badConf := filepath.Join(dir, "devices")
	if err := os.WriteFile(badConf, []byte("roce:127.0.0.1\niwarp:127.0.0.1,iface=\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		o       Options
		env     []string // added to base
		exe     string   // default exe
		path    string   // Command.Path
		ldPath  string   // LD_LIBRARY_PATH
		devices string   // SOFTRDMA_DEVICES; "-": not set
		names   []string // the devices' names
		code    int      // ExitError's; 0: no error
		err     string   // substring of the error
	}{
		{name: "lib beside the binary", o: Options{Program: "prog", Args: []string{"-d", "x"}},
			env: []string{"SOFTRDMA_DEVICES=roce:127.0.0.1"}, path: filepath.Join(path, "prog"), ldPath: lib, devices: "roce:127.0.0.1", names: []string{"sr_roce0"}},
		{name: "binary through a symlink", o: Options{Program: "prog"}, exe: filepath.Join(path, "softrdma"),
			env: []string{"SOFTRDMA_DEVICES=iwarp:127.0.0.1"}, path: filepath.Join(path, "prog"), ldPath: lib, devices: "iwarp:127.0.0.1", names: []string{"sr_iwarp0"}},
		{name: "--lib first, old path kept, no duplicate", o: Options{Program: "prog", Lib: other, Devices: []string{"roce:127.0.0.1", "iwarp:127.0.0.1,name=w"}},
			env: []string{"LD_LIBRARY_PATH=/x:" + other + ":/y"}, path: filepath.Join(path, "prog"), ldPath: other + ":/x:/y",
			devices: "roce:127.0.0.1;iwarp:127.0.0.1,name=w", names: []string{"sr_roce0", "w"}},
		{name: "$SOFTRDMA_LIB", o: Options{Program: "prog", Devices: []string{"roce:127.0.0.2"}}, env: []string{"SOFTRDMA_LIB=" + other},
			path: filepath.Join(path, "prog"), ldPath: other, devices: "roce:127.0.0.2", names: []string{"sr_roce0"}},
		{name: "--device replaces an inherited list", o: Options{Program: "prog", Devices: []string{"roce:127.0.0.2"}}, env: []string{"SOFTRDMA_DEVICES=roce:bad"},
			path: filepath.Join(path, "prog"), ldPath: lib, devices: "roce:127.0.0.2", names: []string{"sr_roce0"}},
		{name: "a path with a slash", o: Options{Program: filepath.Join(path, "prog"), Devices: []string{"roce:127.0.0.2"}},
			path: filepath.Join(path, "prog"), ldPath: lib, devices: "roce:127.0.0.2", names: []string{"sr_roce0"}},

		{name: "no program", o: Options{}, code: 2, err: "no PROGRAM to run"},
		{name: "no library", o: Options{Program: "prog"}, exe: filepath.Join(path, "x/softrdma"), code: 2,
			err: "no libibverbs.so.1 in " + filepath.Join(path, "lib") + " (beside " + filepath.Join(path, "x/softrdma") + "): run make lib (or give --lib DIR)"},
		{name: "--lib without the library", o: Options{Program: "prog", Lib: path}, code: 2, err: "no libibverbs.so.1 in " + path + " (--lib): run make lib"},
		{name: "$SOFTRDMA_LIB without the library", o: Options{Program: "prog"}, env: []string{"SOFTRDMA_LIB=" + path}, code: 2, err: "($SOFTRDMA_LIB): run make lib"},
		{name: "bad --device", o: Options{Program: "prog", Devices: []string{"roce:127.0.0.1,backend=rdma"}}, code: 2,
			err: `--device: device spec "roce:127.0.0.1,backend=rdma": backend "rdma": want udp, afpacket or tap`},
		{name: "two --device on one address", o: Options{Program: "prog", Devices: []string{"roce:127.0.0.1", "roce:127.0.0.1"}}, code: 2,
			err: "both roce on address 127.0.0.1"},
		{name: "bad inherited list", o: Options{Program: "prog"}, env: []string{"SOFTRDMA_DEVICES=roce:x"}, code: 2, err: `SOFTRDMA_DEVICES: device spec "roce:x"`},
		{name: "bad config file", o: Options{Program: "prog"}, env: []string{"SOFTRDMA_CONFIG=" + badConf}, code: 2,
			err: badConf + `:2: device spec "iwarp:127.0.0.1,iface=": iface "": length 0`},
		{name: "program not found", o: Options{Program: "nosuchprog", Devices: []string{"roce:127.0.0.1"}}, code: 127, err: "nosuchprog: executable file not found in $PATH"},
		{name: "path not found", o: Options{Program: "./nosuchprog", Devices: []string{"roce:127.0.0.1"}}, code: 127, err: "./nosuchprog: stat"},
		{name: "not executable", o: Options{Program: filepath.Join(path, "data"), Devices: []string{"roce:127.0.0.1"}}, code: 126, err: "data: not an executable file"},
	}
	for _, tt := range tests {
		e := exe
		if tt.exe != "" {
			e = tt.exe
		}
		c, err := Prepare(tt.o, append(append([]string{}, base...), tt.env...), e)
		if tt.code != 0 {
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != tt.code || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: Prepare = %+v, %v; want exit %d, error containing %q", tt.name, c, err, tt.code, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: error %q is more than one line", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Prepare: %v", tt.name, err)
			continue
		}
		env := envMap(c.Env)
		devices, ok := env["SOFTRDMA_DEVICES"]
		if !ok {
			devices = "-"
		}
		var names []string
		for _, d := range c.Devices {
			names = append(names, d.Name)
		}
		if c.Path != tt.path || env["LD_LIBRARY_PATH"] != tt.ldPath || devices != tt.devices || env["KEEP"] != "1" ||
			!reflect.DeepEqual(names, tt.names) || !reflect.DeepEqual(c.Argv, append([]string{tt.o.Program}, tt.o.Args...)) {
			t.Errorf("%s: Prepare = path %s argv %q LD_LIBRARY_PATH %s SOFTRDMA_DEVICES %s KEEP %q names %v; want %s, %s, %s, 1, %v",
				tt.name, c.Path, c.Argv, env["LD_LIBRARY_PATH"], devices, env["KEEP"], names, tt.path, tt.ldPath, tt.devices, tt.names)
		}
		if n := strings.Count(strings.Join(c.Env, "\n")+"\n", "LD_LIBRARY_PATH="); n != 1 {
			t.Errorf("%s: LD_LIBRARY_PATH %d times in the environment", tt.name, n)
		}
	}
}

// TestPrepareCounters: --metrics and --dump-counters become the libraries'
// SOFTRDMA_METRICS and SOFTRDMA_COUNTERS_DUMP; without them the inherited
// values stay; a --metrics address that is not one is refused, naming it.
func TestPrepareCounters(t *testing.T) {
	dir := tree(t)
	exe := filepath.Join(dir, "bin/softrdma")
	base := []string{"PATH=" + filepath.Join(dir, "path"), "SOFTRDMA_DEVICES=roce:127.0.0.1"}
	tests := []struct {
		name          string
		o             Options
		env           []string
		metrics, dump string // "-": not set
		err           string
	}{
		{"none", Options{Program: "prog"}, nil, "-", "-", ""},
		{"both", Options{Program: "prog", Metrics: "0", DumpCounters: "/tmp/c-%p.json"}, nil, "0", "/tmp/c-%p.json", ""},
		{"inherited", Options{Program: "prog"}, []string{"SOFTRDMA_METRICS=9464", "SOFTRDMA_COUNTERS_DUMP=-"}, "9464", "-", ""},
		{"flag over inherited", Options{Program: "prog", Metrics: "127.0.0.2:9"}, []string{"SOFTRDMA_METRICS=9464"}, "127.0.0.2:9", "-", ""},
		{"bad address", Options{Program: "prog", Metrics: "a:b:c"}, nil, "", "", `--metrics: metrics address "a:b:c"`},
	}
	for _, tt := range tests {
		c, err := Prepare(tt.o, append(append([]string{}, base...), tt.env...), exe)
		if tt.err != "" {
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != 2 || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: Prepare = %v; want exit 2, error containing %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		env := envMap(c.Env)
		get := func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return "-"
		}
		if m, d := get("SOFTRDMA_METRICS"), get("SOFTRDMA_COUNTERS_DUMP"); m != tt.metrics || d != tt.dump {
			t.Errorf("%s: SOFTRDMA_METRICS %q SOFTRDMA_COUNTERS_DUMP %q, want %q %q", tt.name, m, d, tt.metrics, tt.dump)
		}
	}
}

// TestPreparePcap: --pcap FILE sets the libraries' SOFTRDMA_PCAP to FILE made
// absolute (%p kept for the library); without it the inherited value stays.
func TestPreparePcap(t *testing.T) {
	dir := tree(t)
	exe := filepath.Join(dir, "bin/softrdma")
	base := []string{"PATH=" + filepath.Join(dir, "path"), "SOFTRDMA_DEVICES=roce:127.0.0.1"}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    Options
		env  []string
		want string // "-": not set
	}{
		{"none", Options{Program: "prog"}, nil, "-"},
		{"absolute", Options{Program: "prog", Pcap: "/tmp/t-%p.pcapng"}, nil, "/tmp/t-%p.pcapng"},
		{"relative", Options{Program: "prog", Pcap: "t.pcap"}, nil, filepath.Join(wd, "t.pcap")},
		{"inherited", Options{Program: "prog"}, []string{"SOFTRDMA_PCAP=x.pcap"}, "x.pcap"},
		{"flag over inherited", Options{Program: "prog", Pcap: "/y.pcap"}, []string{"SOFTRDMA_PCAP=x.pcap"}, "/y.pcap"},
	}
	for _, tt := range tests {
		c, err := Prepare(tt.o, append(append([]string{}, base...), tt.env...), exe)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, ok := envMap(c.Env)["SOFTRDMA_PCAP"]
		if !ok {
			got = "-"
		}
		if got != tt.want {
			t.Errorf("%s: SOFTRDMA_PCAP %q, want %q", tt.name, got, tt.want)
		}
	}
}
