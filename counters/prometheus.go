package counters

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ContentType is the media type of WritePrometheus's output: Prometheus'
// text exposition format, version 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// family is one metric family of the exposition: its name, help, type,
// whether it is per QP, and its samples for one device or QP (the extra
// label's name and value for each, and the value).
type family struct {
	name, help, typ string
	qp              bool
	label           string // the extra label: code, reason; "" for none
	samples         func(d *Device, c *Counters) []sample
}

type sample struct {
	label string
	value uint64
}

// families are the metric families, in the order they are written: the
// device's info and counts, its link counts, then the QPs' info and counts.
// Device series are labelled device, transport and address; QP series also
// qpn.
var families = func() []family {
	var fs []family
	fs = append(fs, family{name: "softrdma_device_info", typ: "gauge",
		help: "A device: its name, transport (roce, iwarp), address and state (active, closed); always 1."})
	for _, qp := range []bool{false, true} {
		prefix, of := "softrdma_device_", "summed over the device's QPs, live and destroyed"
		if qp {
			prefix, of = "softrdma_qp_", "of the QP"
			fs = append(fs, family{name: "softrdma_qp_info", typ: "gauge", qp: true,
				help: "A live QP: its number, type, state and destination QP number; always 1."})
		}
		for _, s := range scalars {
			get := s.get
			fs = append(fs, family{name: prefix + s.key + "_total", typ: "counter", qp: qp,
				help:    strings.TrimSuffix(s.help, ".") + ", " + of + ".",
				samples: func(_ *Device, c *Counters) []sample { return []sample{{"", *get(c)}} }})
		}
		for _, m := range []struct {
			key, label, help string
			get              func(*Counters) map[string]uint64
		}{
			{"naks_sent", "code", "NAKs sent by NAK code", func(c *Counters) map[string]uint64 { return c.NAKsSent }},
			{"naks_received", "code", "NAKs received by NAK code", func(c *Counters) map[string]uint64 { return c.NAKsReceived }},
			{"drops", "reason", "Packets dropped by reason", func(c *Counters) map[string]uint64 { return c.Drops }},
		} {
			get := m.get
			fs = append(fs, family{name: prefix + m.key + "_total", typ: "counter", qp: qp, label: m.label,
				help: m.help + ", " + of + ".",
				samples: func(_ *Device, c *Counters) []sample {
					mm := get(c)
					var out []sample
					for _, k := range sortedKeys(mm) {
						out = append(out, sample{k, mm[k]})
					}
					return out
				}})
		}
		if !qp {
			for _, l := range []struct {
				key, help string
				get       func(*Link) uint64
			}{
				{"frames_in", "Frames a RoCE device received.", func(l *Link) uint64 { return l.FramesIn }},
				{"frames_out", "Frames a RoCE device sent.", func(l *Link) uint64 { return l.FramesOut }},
				{"neighbor", "ARP and NDP frames a RoCE device handled.", func(l *Link) uint64 { return l.Neighbor }},
				{"queued", "Output frames that waited for their next hop's MAC.", func(l *Link) uint64 { return l.Queued }},
			} {
				get := l.get
				fs = append(fs, family{name: "softrdma_link_" + l.key + "_total", typ: "counter", help: l.help,
					samples: func(d *Device, _ *Counters) []sample {
						if d.Link == nil {
							return nil
						}
						return []sample{{"", get(d.Link)}}
					}})
			}
		}
	}
	return fs
}()

// WritePrometheus writes s in Prometheus' text exposition format: a family
// per count (softrdma_device_*_total, softrdma_qp_*_total,
// softrdma_link_*_total; NAKs by a code label, drops by a reason label)
// and the info gauges softrdma_device_info and softrdma_qp_info that carry
// the names and states. Devices that share name, transport and address (a
// device opened again, the counts of its closed predecessor kept) are
// written as one, their counts summed, since a series must be unique.
func WritePrometheus(w io.Writer, s Snapshot) error {
	devs := mergeSame(s.Devices)
	bw := bufio.NewWriter(w)
	if s.PID != 0 {
		fmt.Fprintf(bw, "# HELP softrdma_process_info The process: its PID and command line; always 1.\n# TYPE softrdma_process_info gauge\n")
		fmt.Fprintf(bw, "softrdma_process_info{pid=\"%d\",command=\"%s\"} 1\n", s.PID, esc(s.Command))
	}
	for _, f := range families {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.typ)
		for i := range devs {
			d := &devs[i]
			dl := fmt.Sprintf(`device="%s",transport="%s",address="%s"`, esc(d.Name), esc(d.Transport), esc(d.Address))
			switch {
			case f.name == "softrdma_device_info":
				fmt.Fprintf(bw, "%s{%s,state=\"%s\"} 1\n", f.name, dl, esc(d.State))
			case f.name == "softrdma_qp_info":
				for _, q := range d.QPs {
					fmt.Fprintf(bw, "%s{%s,qpn=\"%d\",type=\"%s\",state=\"%s\",dest_qpn=\"%d\"} 1\n", f.name, dl, q.QPN, esc(q.Type), esc(q.State), q.DestQPN)
				}
			case f.qp:
				for qi := range d.QPs {
					q := &d.QPs[qi]
					writeSamples(bw, f, fmt.Sprintf(`%s,qpn="%d"`, dl, q.QPN), f.samples(d, &q.Counters))
				}
			default:
				writeSamples(bw, f, dl, f.samples(d, &d.Counters))
			}
		}
	}
	return bw.Flush()
}

func writeSamples(w io.Writer, f family, labels string, ss []sample) {
	for _, s := range ss {
		l := labels
		if f.label != "" {
			l += fmt.Sprintf(`,%s="%s"`, f.label, esc(s.label))
		}
		fmt.Fprintf(w, "%s{%s} %d\n", f.name, l, s.value)
	}
}

// esc escapes a label value: backslash, double quote and line feed.
func esc(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// mergeSame merges devices with the same name, transport and address: the
// counts summed, active if one is, the QPs of both (a later one replacing
// an earlier one of the same QPN).
func mergeSame(devs []Device) []Device {
	out := make([]Device, 0, len(devs))
	at := map[[3]string]int{}
	for _, d := range devs {
		k := [3]string{d.Name, d.Transport, d.Address}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, d)
			continue
		}
		m := &out[i]
		sum := newCounters(false)
		sum.addCounters(&m.Counters)
		sum.addCounters(&d.Counters)
		m.Counters = sum
		if d.State == "active" {
			m.State = "active"
		}
		if d.Link != nil {
			l := Link{}
			if m.Link != nil {
				l = *m.Link
			}
			l.FramesIn += d.Link.FramesIn
			l.FramesOut += d.Link.FramesOut
			l.Neighbor += d.Link.Neighbor
			l.Queued += d.Link.Queued
			m.Link = &l
		}
		qps := []QP{}
		for _, q := range m.QPs {
			if !hasQPN(d.QPs, q.QPN) {
				qps = append(qps, q)
			}
		}
		m.QPs = append(qps, d.QPs...)
	}
	return out
}

func hasQPN(qps []QP, n uint32) bool {
	for _, q := range qps {
		if q.QPN == n {
			return true
		}
	}
	return false
}

// addCounters adds o's counts to c's (maps included: c's must be made).
func (c *Counters) addCounters(o *Counters) {
	for _, s := range scalars {
		*s.get(c) += *s.get(o)
	}
	for k, n := range o.NAKsSent {
		c.NAKsSent[k] += n
	}
	for k, n := range o.NAKsReceived {
		c.NAKsReceived[k] += n
	}
	for k, n := range o.Drops {
		c.Drops[k] += n
	}
}

// ParsePrometheus reads what WritePrometheus writes back into a Snapshot
// (devices and QPs in the order their info lines come): the softrdma_
// families it knows; other families (a Go process's go_*, say), comments
// and blank lines are skipped. A line it cannot read is an error naming
// the line number and what is wrong.
func ParsePrometheus(r io.Reader) (Snapshot, error) {
	byName := map[string]*family{}
	for i := range families {
		byName[families[i].name] = &families[i]
	}
	s := Snapshot{Devices: []Device{}}
	devAt := map[[3]string]int{}
	qpAt := map[qpKey]int{} // a QP's index in its device's QPs
	device := func(l map[string]string) (int, *Device) {
		k := [3]string{l["device"], l["transport"], l["address"]}
		i, ok := devAt[k]
		if !ok {
			i = len(s.Devices)
			devAt[k] = i
			s.Devices = append(s.Devices, Device{Name: k[0], Transport: k[1], Address: k[2], Counters: newCounters(false), QPs: []QP{}})
		}
		return i, &s.Devices[i]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return Snapshot{}, fmt.Errorf("line %d: %w: %q", n, err, line)
		}
		if name == "softrdma_process_info" {
			s.PID, _ = strconv.Atoi(labels["pid"])
			s.Command = labels["command"]
			continue
		}
		f, ok := byName[name]
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			fv, ferr := strconv.ParseFloat(value, 64)
			if ferr != nil || fv < 0 {
				return Snapshot{}, fmt.Errorf("line %d: value %q: not a count", n, value)
			}
			v = uint64(fv)
		}
		di, d := device(labels)
		c := &d.Counters
		if f.qp {
			qpn, err := strconv.ParseUint(labels["qpn"], 10, 32)
			if err != nil {
				return Snapshot{}, fmt.Errorf("line %d: label qpn %q: not a QP number", n, labels["qpn"])
			}
			q := qpOf(d, qpKey{di, uint32(qpn)}, qpAt)
			c = &q.Counters
			if name == "softrdma_qp_info" {
				q.Type, q.State = labels["type"], labels["state"]
				dest, err := strconv.ParseUint(labels["dest_qpn"], 10, 32)
				if err != nil {
					return Snapshot{}, fmt.Errorf("line %d: label dest_qpn %q: not a QP number", n, labels["dest_qpn"])
				}
				q.DestQPN = uint32(dest)
				continue
			}
		}
		switch {
		case name == "softrdma_device_info":
			d.State = labels["state"]
		case strings.HasPrefix(name, "softrdma_link_"):
			if d.Link == nil {
				d.Link = &Link{}
			}
			key := strings.TrimSuffix(strings.TrimPrefix(name, "softrdma_link_"), "_total")
			if p, ok := map[string]*uint64{"frames_in": &d.Link.FramesIn, "frames_out": &d.Link.FramesOut,
				"neighbor": &d.Link.Neighbor, "queued": &d.Link.Queued}[key]; ok {
				*p = v
			}
		case f.label != "":
			k := labels[f.label]
			switch {
			case strings.HasSuffix(name, "_naks_sent_total"):
				c.NAKsSent[k] = v
			case strings.HasSuffix(name, "_naks_received_total"):
				c.NAKsReceived[k] = v
			default:
				c.Drops[k] = v
			}
		default:
			key := strings.TrimSuffix(name[strings.Index(name[len("softrdma_"):], "_")+len("softrdma_")+1:], "_total")
			for _, sc := range scalars {
				if sc.key == key {
					*sc.get(c) = v
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Snapshot{}, err
	}
	return s, nil
}

// qpKey is a QP of a parsed snapshot: its device's index and its QPN.
type qpKey struct {
	dev int
	qpn uint32
}

// qpOf returns d's QP k.qpn, added if it is new (at: the index of each).
func qpOf(d *Device, k qpKey, at map[qpKey]int) *QP {
	if i, ok := at[k]; ok {
		return &d.QPs[i]
	}
	at[k] = len(d.QPs)
	d.QPs = append(d.QPs, QP{QPN: k.qpn, Counters: newCounters(false)})
	return &d.QPs[len(d.QPs)-1]
}

// parseSample splits a sample line, NAME{LABEL="VALUE",...} VALUE [TIMESTAMP]
// or NAME VALUE [TIMESTAMP], into its parts.
func parseSample(line string) (name string, labels map[string]string, value string, err error) {
	labels = map[string]string{}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return "", nil, "", fmt.Errorf("no value")
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " \t,")
			if rest == "" {
				return "", nil, "", fmt.Errorf("no closing brace")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq <= 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
				return "", nil, "", fmt.Errorf("label without =\"VALUE\"")
			}
			key := strings.TrimSpace(rest[:eq])
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				switch c := rest[j]; {
				case c == '\\' && j+1 < len(rest):
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
				case c == '"':
					rest, closed = rest[j+1:], true
				default:
					v.WriteByte(c)
				}
				if closed {
					break
				}
			}
			if !closed {
				return "", nil, "", fmt.Errorf("label %s: no closing quote", key)
			}
			labels[key] = v.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) < 1 || len(f) > 2 {
		return "", nil, "", fmt.Errorf("want one value and an optional timestamp after the labels")
	}
	return name, labels, f[0], nil
}
