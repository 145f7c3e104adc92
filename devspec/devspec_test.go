package devspec

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	a4 := netip.MustParseAddr("127.0.0.1")
	a6 := netip.MustParseAddr("fd00::2")
	tests := []struct {
		in   string
		want Spec
		err  string // substring of the error; empty: no error
	}{
		{in: "roce:127.0.0.1", want: Spec{Transport: RoCE, Addr: a4, Backend: BackendUDP}},
		{in: "roce:127.0.0.1,backend=udp", want: Spec{Transport: RoCE, Addr: a4, Backend: BackendUDP}},
		{in: "roce:127.0.0.1,backend=afpacket,iface=eth0", want: Spec{Transport: RoCE, Addr: a4, Backend: BackendAFPacket, Iface: "eth0"}},
		{in: "roce:127.0.0.1,backend=tap,iface=tap7,name=left", want: Spec{Transport: RoCE, Addr: a4, Backend: BackendTAP, Iface: "tap7", Name: "left"}},
		{in: "roce:127.0.0.1,name=a,backend=tap", want: Spec{Transport: RoCE, Addr: a4, Backend: BackendTAP, Name: "a"}},
		{in: "roce:10.9.0.2,backend=tap,kernel-addr=10.9.0.1/24", want: Spec{Transport: RoCE, Addr: netip.MustParseAddr("10.9.0.2"), Backend: BackendTAP,
			KernelAddr: netip.MustParsePrefix("10.9.0.1/24")}},
		{in: "roce:[fd00::2],backend=tap,kernel-addr=[fd00::1]/64", want: Spec{Transport: RoCE, Addr: a6, Backend: BackendTAP,
			KernelAddr: netip.MustParsePrefix("fd00::1/64")}},
		{in: "roce:fd00::2", want: Spec{Transport: RoCE, Addr: a6, Backend: BackendUDP}},
		{in: "roce:[fd00::2]", want: Spec{Transport: RoCE, Addr: a6, Backend: BackendUDP}},
		{in: "roce:::ffff:127.0.0.1", want: Spec{Transport: RoCE, Addr: a4, Backend: BackendUDP}},
		{in: "iwarp:127.0.0.1", want: Spec{Transport: IWARP, Addr: a4}},
		{in: "iwarp:127.0.0.1,iface=lo,name=sr_x.1-2", want: Spec{Transport: IWARP, Addr: a4, Iface: "lo", Name: "sr_x.1-2"}},

		{in: "127.0.0.1", err: `no transport`},
		{in: "ib:127.0.0.1", err: `transport "ib": want roce or iwarp`},
		{in: "roce:", err: `address: empty`},
		{in: "roce:,backend=udp", err: `address: empty`},
		{in: "roce:localhost", err: `address "localhost": not an IP address`},
		{in: "roce:[fd00::2", err: `address "[fd00::2": no closing bracket`},
		{in: "roce:fe80::1%eth0", err: `zone "eth0"`},
		{in: "roce:0.0.0.0", err: `address "0.0.0.0": not a unicast address`},
		{in: "roce:224.0.0.1", err: `not a unicast address`},
		{in: "roce:127.0.0.1,backend=rdma", err: `backend "rdma": want udp, afpacket or tap`},
		{in: "iwarp:127.0.0.1,backend=udp", err: `backend=udp: only roce devices have a backend`},
		{in: "roce:127.0.0.1,mtu=1024", err: `unknown field "mtu"`},
		{in: "roce:127.0.0.1,afpacket", err: `field "afpacket": want KEY=VALUE`},
		{in: "roce:127.0.0.1,name=a,name=b", err: `field name given twice`},
		{in: "roce:127.0.0.1,name=", err: `name "": length 0`},
		{in: "roce:127.0.0.1,name=a/b", err: `name "a/b": character '/' not allowed`},
		{in: "roce:127.0.0.1,name=" + strings.Repeat("x", 64), err: `length 64: want 1 to 63`},
		{in: "roce:10.9.0.2,kernel-addr=10.9.0.1/24", err: `kernel-addr=10.9.0.1/24: only backend=tap has a kernel side`},
		{in: "roce:10.9.0.2,backend=tap,kernel-addr=10.9.0.1", err: `kernel-addr "10.9.0.1": no prefix length`},
		{in: "roce:10.9.0.2,backend=tap,kernel-addr=10.9.0.1/33", err: `prefix length "33": want 1 to 32`},
		{in: "roce:10.9.0.2,backend=tap,kernel-addr=10.9.0.1/0", err: `prefix length 0`},
		{in: "roce:10.9.0.2,backend=tap,kernel-addr=host/24", err: `kernel-addr "host/24": not an IP address`},
		{in: "roce:10.9.0.2,backend=tap,kernel-addr=10.9.0.2/24", err: `the device's own address`},
		{in: "roce:10.9.0.2,backend=tap,kernel-addr=10.9.1.1/24", err: `does not hold the device's address 10.9.0.2`},
		{in: "roce:127.0.0.1,iface=", err: `iface "": length 0`},
		{in: "roce:127.0.0.1,iface=averyveryverylongname", err: `length 21: want 1 to 15`},
		{in: "roce:127.0.0.1,iface=a:b", err: `iface "a:b": character ':' not allowed`},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.err)
			} else if !strings.Contains(err.Error(), tt.in) {
				t.Errorf("Parse(%q): error %q does not name the spec", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		back, err := Parse(got.String())
		if err != nil || back != got {
			t.Errorf("Parse(%q).String() = %q parses to %+v, %v", tt.in, got.String(), back, err)
		}
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in    string
		names []string
		err   string
	}{
		{in: "", names: []string{}},
		{in: " ; ", names: []string{}},
		{in: "roce:127.0.0.1", names: []string{"sr_roce0"}},
		{in: "roce:127.0.0.1;iwarp:127.0.0.1", names: []string{"sr_roce0", "sr_iwarp0"}},
		{in: "roce:127.0.0.1 roce:127.0.0.2\tiwarp:127.0.0.1\niwarp:127.0.0.2", names: []string{"sr_roce0", "sr_roce1", "sr_iwarp0", "sr_iwarp1"}},
		// A named device takes no number: the unnamed ones keep theirs.
		{in: "roce:127.0.0.1,name=left;roce:127.0.0.2", names: []string{"left", "sr_roce0"}},
		{in: "roce:127.0.0.1;;roce:127.0.0.2,name=sr_roce0", err: `both named "sr_roce0"`},
		{in: "roce:127.0.0.1,name=x;iwarp:127.0.0.2,name=x", err: `both named "x"`},
		{in: "roce:127.0.0.1;roce:127.0.0.1,backend=tap", err: `both roce on address 127.0.0.1`},
		{in: "roce:127.0.0.1;roce:bad", err: `device spec "roce:bad": address "bad"`},
	}
	for _, tt := range tests {
		got, err := ParseList(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseList(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseList(%q): %v", tt.in, err)
			continue
		}
		names := []string{}
		for _, s := range got {
			names = append(names, s.Name)
		}
		if strings.Join(names, ",") != strings.Join(tt.names, ",") {
			t.Errorf("ParseList(%q) names %v, want %v", tt.in, names, tt.names)
		}
	}
}
