// Package devspec parses the device specifications that say which softrdma
// devices a program sees: `softrdma run --device SPEC` and the SOFTRDMA_DEVICES
// environment variable read by softrdma's libibverbs.so.1 replacement.
//
// A SPEC is
//
//	roce:ADDR[,backend=udp|afpacket|tap][,iface=IFACE][,kernel-addr=PREFIX][,name=NAME]
//	iwarp:ADDR[,iface=IFACE][,name=NAME]
//
// ADDR is the IPv4 or IPv6 address the device sends from and answers on (an
// IPv6 address may be written in brackets, [fe80::1]). roce devices carry
// RoCEv2 over a UDP socket bound to ADDR (backend udp, the default, no
// privileges), over raw frames on an existing interface (afpacket) or as the
// host behind a new TAP device (tap); iwarp devices carry iWARP over TCP from
// ADDR. iface names the interface (udp: the one whose addresses make the GID
// table; afpacket: the interface to use; tap: the TAP device's name).
// kernel-addr (tap only) is an address with prefix length, 10.9.0.1/24, that
// the kernel's side of the TAP device gets, so that the kernel is a second
// host on the TAP's link: the prefix must hold ADDR.
//
// A device's name is NAME if given, else sr_roceN or sr_iwarpN, N counting
// the unnamed devices of that transport from 0 in the order they are given:
// the same list always gives the same names. SOFTRDMA_DEVICES holds several
// SPECs separated by ';' or white space (a comma separates the fields of one
// SPEC).
//
// Where the list comes from (Resolve): SOFTRDMA_DEVICES; else a config file,
// one SPEC per line ($SOFTRDMA_CONFIG, else $XDG_CONFIG_HOME/softrdma/devices,
// else /etc/softrdma/devices); else Defaults, one roce and one iwarp device
// per interface that is up, as `rdma link add` users set up rxe and siw.
package devspec

import (
	"fmt"
	"net/netip"
	"strings"
)

// Transport is the wire protocol of a device.
type Transport string

// The transports.
const (
	RoCE  Transport = "roce"
	IWARP Transport = "iwarp"
)

// Backend is how a RoCE device reaches the network (roce.Backend's values).
type Backend string

// The RoCE backends.
const (
	BackendUDP      Backend = "udp"
	BackendAFPacket Backend = "afpacket"
	BackendTAP      Backend = "tap"
)

// EnvVar is the environment variable that lists the devices.
const EnvVar = "SOFTRDMA_DEVICES"

// MaxNameLen is the longest device name: libibverbs' IBV_SYSFS_NAME_MAX (64)
// less its terminating NUL.
const MaxNameLen = 63

// Spec is one parsed device specification.
type Spec struct {
	// Transport is RoCE or IWARP.
	Transport Transport
	// Addr is the device's address.
	Addr netip.Addr
	// Backend is the RoCE backend (BackendUDP when not given); empty for iWARP.
	Backend Backend
	// Iface is the interface named by iface=, or empty.
	Iface string
	// KernelAddr is kernel-addr='s address for the kernel's side of a TAP
	// device (backend tap only), or the zero Prefix.
	KernelAddr netip.Prefix
	// Name is the device name: the one name= gave, or the one List assigned.
	// Parse leaves it empty when name= is absent.
	Name string
}

// String returns the spec in the form Parse reads, fields in a fixed order;
// Parse(s.String()) gives s back.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(string(s.Transport))
	b.WriteByte(':')
	if s.Addr.Is6() && !s.Addr.Is4In6() {
		b.WriteString("[" + s.Addr.String() + "]")
	} else {
		b.WriteString(s.Addr.String())
	}
	if s.Transport == RoCE && s.Backend != "" && s.Backend != BackendUDP {
		b.WriteString(",backend=" + string(s.Backend))
	}
	if s.Iface != "" {
		b.WriteString(",iface=" + s.Iface)
	}
	if s.KernelAddr.IsValid() {
		b.WriteString(",kernel-addr=" + s.KernelAddr.String())
	}
	if s.Name != "" {
		b.WriteString(",name=" + s.Name)
	}
	return b.String()
}

// Parse parses one SPEC. Errors name the spec and the field and value at fault.
func Parse(spec string) (Spec, error) {
	var s Spec
	fail := func(format string, a ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("device spec %q: %s", spec, fmt.Sprintf(format, a...))
	}
	tr, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return fail("no transport: want roce:ADDR or iwarp:ADDR")
	}
	switch Transport(tr) {
	case RoCE:
		s.Transport, s.Backend = RoCE, BackendUDP
	case IWARP:
		s.Transport = IWARP
	default:
		return fail("transport %q: want roce or iwarp", tr)
	}
	fields := strings.Split(rest, ",")
	addr := fields[0]
	if addr == "" {
		return fail("address: empty")
	}
	a, err := parseAddr(addr)
	if err != nil {
		return fail("address %q: %v", addr, err)
	}
	s.Addr = a
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fail("field %q: want KEY=VALUE", f)
		}
		if seen[k] {
			return fail("field %s given twice", k)
		}
		seen[k] = true
		switch k {
		case "backend":
			if s.Transport != RoCE {
				return fail("backend=%s: only roce devices have a backend", v)
			}
			switch Backend(v) {
			case BackendUDP, BackendAFPacket, BackendTAP:
				s.Backend = Backend(v)
			default:
				return fail("backend %q: want udp, afpacket or tap", v)
			}
		case "iface":
			if err := checkIface(v); err != nil {
				return fail("iface %q: %v", v, err)
			}
			s.Iface = v
		case "name":
			if err := checkName(v); err != nil {
				return fail("name %q: %v", v, err)
			}
			s.Name = v
		case "kernel-addr":
			p, err := parsePrefix(v)
			if err != nil {
				return fail("kernel-addr %q: %v", v, err)
			}
			s.KernelAddr = p
		default:
			return fail("unknown field %q (want backend, iface, kernel-addr or name)", k)
		}
	}
	if s.KernelAddr.IsValid() {
		switch {
		case s.Backend != BackendTAP:
			return fail("kernel-addr=%s: only backend=tap has a kernel side", s.KernelAddr)
		case s.KernelAddr.Addr() == s.Addr:
			return fail("kernel-addr=%s: the device's own address", s.KernelAddr)
		case !s.KernelAddr.Contains(s.Addr):
			return fail("kernel-addr=%s: does not hold the device's address %v (the kernel would have no route to it)", s.KernelAddr, s.Addr)
		}
	}
	return s, nil
}

// parsePrefix parses ADDR/LEN, an IPv6 address optionally in brackets; an
// IPv4-mapped IPv6 address is taken as the IPv4 address.
func parsePrefix(s string) (netip.Prefix, error) {
	a, l, ok := strings.Cut(s, "/")
	if !ok {
		return netip.Prefix{}, fmt.Errorf("no prefix length: want ADDR/LEN")
	}
	addr, err := parseAddr(a)
	if err != nil {
		return netip.Prefix{}, err
	}
	p, err := netip.ParsePrefix(addr.String() + "/" + l)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("prefix length %q: want 1 to %d", l, addr.BitLen())
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("prefix length 0: want 1 to %d", addr.BitLen())
	}
	return p, nil
}

// parseAddr parses an IP address, IPv6 optionally in brackets; an IPv4-mapped
// IPv6 address is taken as the IPv4 address.
func parseAddr(s string) (netip.Addr, error) {
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return netip.Addr{}, fmt.Errorf("no closing bracket")
		}
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("not an IP address")
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("zone %q: name the interface with iface= instead", a.Zone())
	}
	a = a.Unmap()
	if a.IsUnspecified() || a.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("not a unicast address")
	}
	return a, nil
}

// checkIface accepts a Linux interface name: 1 to 15 bytes (IFNAMSIZ less the
// NUL), no '/', white space, ':' or ','.
func checkIface(s string) error {
	if s == "" || len(s) > 15 {
		return fmt.Errorf("length %d: want 1 to 15 bytes", len(s))
	}
	if i := strings.IndexAny(s, "/:,; \t\n"); i >= 0 {
		return fmt.Errorf("character %q not allowed", s[i])
	}
	return nil
}

// checkName accepts a device name: 1 to MaxNameLen letters, digits, '_', '-'
// and '.', as sysfs and the tools print them.
func checkName(s string) error {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Errorf("length %d: want 1 to %d bytes", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("character %q not allowed (want letters, digits, _ - .)", c)
		}
	}
	return nil
}

// ParseList parses a list of SPECs separated by ';' or white space (empty
// items are skipped) and names them (Name).
func ParseList(list string) ([]Spec, error) {
	items := strings.FieldsFunc(list, func(r rune) bool {
		return r == ';' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	specs := make([]Spec, 0, len(items))
	for _, it := range items {
		s, err := Parse(it)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return Name(specs)
}

// Name gives every spec without a name its stable one, sr_roceN or sr_iwarpN
// (N counts the unnamed specs of that transport from 0, in order), and returns
// the list. Two devices with one name, or two on one transport and address
// (they would share one socket address), are an error.
func Name(specs []Spec) ([]Spec, error) {
	return nameSpecs(specs, func(i int) string { return fmt.Sprintf("device spec %d", i+1) })
}

// nameSpecs is Name with label(i) saying where spec i came from in its errors
// ("device spec 2", "/etc/softrdma/devices:7").
func nameSpecs(specs []Spec, label func(i int) string) ([]Spec, error) {
	out := append([]Spec(nil), specs...)
	next := map[Transport]int{}
	for i := range out {
		if out[i].Name == "" {
			out[i].Name = fmt.Sprintf("sr_%s%d", out[i].Transport, next[out[i].Transport])
			next[out[i].Transport]++
		}
	}
	names := map[string]int{}
	addrs := map[string]int{}
	for i, s := range out {
		if j, ok := names[s.Name]; ok {
			return nil, fmt.Errorf("%s (%s) and %s (%s): both named %q", label(j), out[j], label(i), s, s.Name)
		}
		names[s.Name] = i
		key := string(s.Transport) + " " + s.Addr.String()
		if j, ok := addrs[key]; ok {
			return nil, fmt.Errorf("%s (%s) and %s (%s): both %s on address %s", label(j), out[j], label(i), s, s.Transport, s.Addr)
		}
		addrs[key] = i
	}
	return out, nil
}
