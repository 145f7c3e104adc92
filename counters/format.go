package counters

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteJSON writes s as indented JSON, snake_case keys.
func WriteJSON(w io.Writer, s Snapshot) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteText writes s as `rdma statistic` does: a line per device ("link
// NAME/1") and one per QP ("qp NAME/1 lqpn N"), each KEY VALUE pairs, every
// plain count, then the NAKs by code and the drops by reason that are not
// zero (naks_sent.CODE, drops.REASON). No devices: the line "no devices".
func WriteText(w io.Writer, s Snapshot) error {
	var b strings.Builder
	if len(s.Devices) == 0 {
		b.WriteString("no devices\n")
	}
	for _, d := range s.Devices {
		addr := d.Address
		if addr == "" {
			addr = "-"
		}
		fmt.Fprintf(&b, "link %s/1 transport %s address %s state %s", d.Name, d.Transport, addr, d.State)
		if d.Link != nil {
			fmt.Fprintf(&b, " frames_in %d frames_out %d neighbor %d queued %d", d.Link.FramesIn, d.Link.FramesOut, d.Link.Neighbor, d.Link.Queued)
		}
		writeCounters(&b, &d.Counters)
		b.WriteByte('\n')
		for _, q := range d.QPs {
			fmt.Fprintf(&b, "qp %s/1 lqpn %d type %s state %s rqpn %d", d.Name, q.QPN, q.Type, q.State, q.DestQPN)
			writeCounters(&b, &q.Counters)
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeCounters(b *strings.Builder, c *Counters) {
	for _, s := range scalars {
		fmt.Fprintf(b, " %s %d", s.key, *s.get(c))
	}
	for _, m := range []struct {
		name string
		m    map[string]uint64
	}{{"naks_sent", c.NAKsSent}, {"naks_received", c.NAKsReceived}, {"drops", c.Drops}} {
		for _, k := range sortedKeys(m.m) {
			if n := m.m[k]; n != 0 {
				fmt.Fprintf(b, " %s.%s %d", m.name, k, n)
			}
		}
	}
}

// sortedKeys returns m's keys in the order of NAKCodes, DropReasons and
// LinkDropReasons, then any others sorted.
func sortedKeys(m map[string]uint64) []string {
	var keys []string
	seen := map[string]bool{}
	for _, list := range [][]string{NAKCodes, DropReasons, LinkDropReasons} {
		for _, k := range list {
			if _, ok := m[k]; ok && !seen[k] {
				keys, seen[k] = append(keys, k), true
			}
		}
	}
	var rest []string
	for k := range m {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(keys, rest...)
}
