package devspec

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// specStrings renders specs as NAME=SPEC, for comparing lists.
func specStrings(specs []Spec) []string {
	out := []string{}
	for _, s := range specs {
		n := s.Name
		s.Name = ""
		out = append(out, n+"="+s.String())
	}
	return out
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string // NAME=SPEC
		err        string   // the whole error; empty: none
	}{
		{"empty", "", []string{}, ""},
		{"comments only", "# softrdma devices\n\n   # none yet\n", []string{}, ""},
		{"two", "roce:10.0.0.1\niwarp:10.0.0.1\n", []string{"sr_roce0=roce:10.0.0.1", "sr_iwarp0=iwarp:10.0.0.1"}, ""},
		{"comments and blanks", "# lab\n\n  roce:10.0.0.1,iface=eth0   # the NIC\n\troce:127.0.0.2,name=lo2\nroce:10.0.0.2", []string{
			"sr_roce0=roce:10.0.0.1,iface=eth0", "lo2=roce:127.0.0.2", "sr_roce1=roce:10.0.0.2"}, ""},
		{"CRLF", "roce:10.0.0.1\r\n", []string{"sr_roce0=roce:10.0.0.1"}, ""},
		{"bad address", "# x\nroce:10.0.0.1\nroce:10.0.0.x\n", nil,
			`F:3: device spec "roce:10.0.0.x": address "10.0.0.x": not an IP address`},
		{"bad field", "iwarp:10.0.0.1,backend=tap", nil,
			`F:1: device spec "iwarp:10.0.0.1,backend=tap": backend=tap: only roce devices have a backend`},
		{"two on a line", "roce:10.0.0.1 iwarp:10.0.0.1", nil,
			`F:1: "iwarp:10.0.0.1" after the device spec "roce:10.0.0.1": want one SPEC per line`},
		{"same name", "roce:10.0.0.1,name=a\n\niwarp:10.0.0.1,name=a\n", nil,
			`F:1 (roce:10.0.0.1,name=a) and F:3 (iwarp:10.0.0.1,name=a): both named "a"`},
		{"same address", "roce:10.0.0.1\n#\nroce:10.0.0.1,name=b\n", nil,
			`F:1 (roce:10.0.0.1,name=sr_roce0) and F:3 (roce:10.0.0.1,name=b): both roce on address 10.0.0.1`},
	}
	for _, tt := range tests {
		got, err := ParseConfig("F", strings.NewReader(tt.text))
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%s: ParseConfig = %v, %v; want error %q", tt.name, specStrings(got), err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(specStrings(got), tt.want) {
			t.Errorf("%s: ParseConfig = %v, %v; want %v", tt.name, specStrings(got), err, tt.want)
		}
	}
}

func TestConfigPaths(t *testing.T) {
	tests := []struct {
		env      map[string]string
		want     []string
		explicit bool
	}{
		{map[string]string{"SOFTRDMA_CONFIG": "/x/devs", "HOME": "/home/u"}, []string{"/x/devs"}, true},
		{map[string]string{"XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}, []string{"/xdg/softrdma/devices", SystemConfig}, false},
		{map[string]string{"HOME": "/home/u"}, []string{"/home/u/.config/softrdma/devices", SystemConfig}, false},
		// A relative XDG_CONFIG_HOME is ignored, as the specification says.
		{map[string]string{"XDG_CONFIG_HOME": "rel", "HOME": "/home/u"}, []string{"/home/u/.config/softrdma/devices", SystemConfig}, false},
		{map[string]string{}, []string{SystemConfig}, false},
	}
	for _, tt := range tests {
		got, explicit := ConfigPaths(func(k string) string { return tt.env[k] })
		if !reflect.DeepEqual(got, tt.want) || explicit != tt.explicit {
			t.Errorf("ConfigPaths(%v) = %v, %v; want %v, %v", tt.env, got, explicit, tt.want, tt.explicit)
		}
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "roce:10.0.0.1\n")
	bad := write("bad", "\nroce:10.0.0.1,mtu=9000\n")
	write("xdg/softrdma/devices", "iwarp:10.0.0.9,name=fromxdg\n")
	write("home/.config/softrdma/devices", "# roce:10.0.0.1 (a template)\n")
	defaults, _ := Name(Defaults())

	tests := []struct {
		name string
		env  map[string]string
		want []string // NAME=SPEC; nil: the defaults
		src  Source
		err  string // substring
	}{
		{"env wins", map[string]string{EnvVar: "iwarp:127.0.0.1", ConfigEnvVar: good}, []string{"sr_iwarp0=iwarp:127.0.0.1"}, Source{Kind: SourceEnv}, ""},
		{"env bad", map[string]string{EnvVar: "roce:x"}, nil, Source{Kind: SourceEnv}, `SOFTRDMA_DEVICES: device spec "roce:x": address "x"`},
		{"blank env: config", map[string]string{EnvVar: " ", ConfigEnvVar: good}, []string{"sr_roce0=roce:10.0.0.1"}, Source{SourceConfig, good}, ""},
		{"SOFTRDMA_CONFIG", map[string]string{ConfigEnvVar: good, "XDG_CONFIG_HOME": filepath.Join(dir, "xdg")}, []string{"sr_roce0=roce:10.0.0.1"}, Source{SourceConfig, good}, ""},
		{"SOFTRDMA_CONFIG bad", map[string]string{ConfigEnvVar: bad}, nil, Source{SourceConfig, bad}, bad + `:2: device spec "roce:10.0.0.1,mtu=9000": unknown field "mtu"`},
		{"SOFTRDMA_CONFIG missing", map[string]string{ConfigEnvVar: filepath.Join(dir, "nope")}, nil, Source{SourceConfig, filepath.Join(dir, "nope")}, "SOFTRDMA_CONFIG=" + filepath.Join(dir, "nope") + ": open "},
		{"XDG", map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "xdg")}, []string{"fromxdg=iwarp:10.0.0.9"}, Source{SourceConfig, filepath.Join(dir, "xdg/softrdma/devices")}, ""},
		{"HOME, a template: defaults", map[string]string{"HOME": filepath.Join(dir, "home")}, nil, Source{Kind: SourceDefaults}, ""},
	}
	_, err := os.Stat(SystemConfig)
	systemConfig := err == nil
	if systemConfig {
		t.Logf("%s exists: the case that falls through to the defaults is skipped", SystemConfig)
	}
	for _, tt := range tests {
		got, src, err := Resolve(func(k string) string { return tt.env[k] })
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || src != tt.src {
				t.Errorf("%s: Resolve = %v, %v, %v; want source %v, error containing %q", tt.name, specStrings(got), src, err, tt.src, tt.err)
			}
			continue
		}
		if tt.src.Kind == SourceDefaults && systemConfig {
			continue
		}
		want := tt.want
		if want == nil {
			want = specStrings(defaults)
		}
		if err != nil || src != tt.src || !reflect.DeepEqual(specStrings(got), want) {
			t.Errorf("%s: Resolve = %v, %v, %v; want %v from %v", tt.name, specStrings(got), src, err, want, tt.src)
		}
	}
}

func TestDefaultsFrom(t *testing.T) {
	a := netip.MustParseAddr
	lo := Iface{Name: "lo", Up: true, Loopback: true, Addrs: []netip.Addr{a("127.0.0.1"), a("::1")}}
	eth0 := Iface{Name: "eth0", Up: true, Addrs: []netip.Addr{a("fe80::1"), a("192.0.2.2"), a("fd00::2")}}
	tests := []struct {
		name string
		ifs  []Iface
		want []string // NAME=SPEC after Name
	}{
		{"lo and a NIC: the NIC only, as rxe", []Iface{lo, eth0}, []string{
			"sr_roce0=roce:192.0.2.2,iface=eth0", "sr_iwarp0=iwarp:192.0.2.2,iface=eth0"}},
		{"lo alone: lo's IPv4 address", []Iface{lo}, []string{
			"sr_roce0=roce:127.0.0.1,iface=lo", "sr_iwarp0=iwarp:127.0.0.1,iface=lo"}},
		{"two NICs: roce devices first, in interface order", []Iface{lo, eth0,
			{Name: "eth1", Up: true, Addrs: []netip.Addr{a("198.51.100.7"), a("198.51.100.8")}}}, []string{
			"sr_roce0=roce:192.0.2.2,iface=eth0", "sr_roce1=roce:198.51.100.7,iface=eth1",
			"sr_iwarp0=iwarp:192.0.2.2,iface=eth0", "sr_iwarp1=iwarp:198.51.100.7,iface=eth1"}},
		{"IPv6 only: the first global address", []Iface{lo,
			{Name: "eth0", Up: true, Addrs: []netip.Addr{a("fe80::1"), a("2001:db8::5"), a("fd00::5")}}}, []string{
			"sr_roce0=roce:[2001:db8::5],iface=eth0", "sr_iwarp0=iwarp:[2001:db8::5],iface=eth0"}},
		{"down, link-local only, no address: lo instead", []Iface{lo,
			{Name: "eth0", Up: false, Addrs: []netip.Addr{a("192.0.2.2")}},
			{Name: "eth1", Up: true, Addrs: []netip.Addr{a("fe80::2")}},
			{Name: "eth2", Up: true}}, []string{
			"sr_roce0=roce:127.0.0.1,iface=lo", "sr_iwarp0=iwarp:127.0.0.1,iface=lo"}},
		{"nothing up", []Iface{{Name: "lo", Loopback: true, Addrs: []netip.Addr{a("127.0.0.1")}}}, []string{}},
	}
	for _, tt := range tests {
		got, err := Name(DefaultsFrom(tt.ifs))
		if err != nil || !reflect.DeepEqual(specStrings(got), tt.want) {
			t.Errorf("%s: %v, %v; want %v", tt.name, specStrings(got), err, tt.want)
		}
	}
}
