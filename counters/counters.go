// Package counters is softrdma's one snapshot of its devices' counters, what
// iproute2's `rdma statistic` shows of a kernel device: per device and per
// QP, packets and bytes each way, retransmissions, timeouts, tail-loss
// probes, ACKs, NAKs by code, RNR NAKs, duplicates, and drops by reason
// (the engine's, and for RoCE the device's own: bad ICRC, not for us, ...).
//
// A Snapshot is taken from the engine (ibtransport.Context.QPStats and
// Counters) and, for RoCE, the device (roce.Device.Counters) by Collect; a
// Registry holds the devices a process has open (Default: the one
// device.Open registers with) and keeps the last counts of those it closed.
// A snapshot is written as text (`rdma statistic` style, WriteText), as
// JSON with snake_case keys (WriteJSON), or in Prometheus' text exposition
// format (WritePrometheus), which ParsePrometheus reads back: Serve puts a
// Registry on an HTTP endpoint (softrdma's --metrics ADDR,
// SOFTRDMA_METRICS for the verbs libraries) and Fetch reads one
// (softrdma stat --from ADDR).
package counters

import (
	"net/netip"
	"strings"
	"unicode"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// Snapshot is the counters of a set of devices at one time.
type Snapshot struct {
	// PID and Command are the process's, when the snapshot came from a
	// metrics endpoint (Serve writes them; zero otherwise).
	PID     int      `json:"pid,omitempty"`
	Command string   `json:"command,omitempty"`
	Devices []Device `json:"devices"`
}

// Device is one device's counters.
type Device struct {
	// Name is the device's name (a SPEC's name=, or the interface the
	// tool shows, as perftest's "Device").
	Name string `json:"name"`
	// Transport is "roce" or "iwarp".
	Transport string `json:"transport"`
	// Address is the device's IP address ("" while an iWARP device has
	// none).
	Address string `json:"address"`
	// State is "active" while the device is open, "closed" after (the
	// counts it had then).
	State string `json:"state"`
	// Counters are summed over every QP the device had, live and
	// destroyed; their Drops add the device's own drops, of packets that
	// reached no QP: the engine's (malformed, unknown_qp) and, for RoCE,
	// the device's (LinkDropReasons).
	Counters Counters `json:"counters"`
	// Link are a RoCE device's frame counts (nil for iWARP, which has a
	// TCP connection per QP).
	Link *Link `json:"link,omitempty"`
	// QPs are the live QPs, in QPN order.
	QPs []QP `json:"qps"`
}

// Link is what a RoCE device counts below the engine.
type Link struct {
	FramesIn  uint64 `json:"frames_in"`
	FramesOut uint64 `json:"frames_out"`
	// Neighbor are ARP and NDP frames handled (backends afpacket and tap).
	Neighbor uint64 `json:"neighbor"`
	// Queued are output frames that waited for their next hop's MAC.
	Queued uint64 `json:"queued"`
}

// QP is one QP's counters.
type QP struct {
	QPN      uint32   `json:"qpn"`
	Type     string   `json:"type"`
	State    string   `json:"state"`
	DestQPN  uint32   `json:"dest_qpn"`
	Counters Counters `json:"counters"`
}

// Counters are a QP's counts (ibtransport.QPCounters), or a device's sum.
// On iWARP a packet is an FPDU; the IB-only counts stay zero there.
type Counters struct {
	PacketsOut         uint64 `json:"packets_out"`
	BytesOut           uint64 `json:"bytes_out"`
	PacketsIn          uint64 `json:"packets_in"`
	BytesIn            uint64 `json:"bytes_in"`
	Retransmissions    uint64 `json:"retransmissions"`
	Timeouts           uint64 `json:"timeouts"`
	Probes             uint64 `json:"probes"`
	AcksSent           uint64 `json:"acks_sent"`
	AcksReceived       uint64 `json:"acks_received"`
	RNRNAKsSent        uint64 `json:"rnr_naks_sent"`
	RNRNAKsReceived    uint64 `json:"rnr_naks_received"`
	DuplicateRequests  uint64 `json:"duplicate_requests"`
	DuplicateResponses uint64 `json:"duplicate_responses"`
	TerminatesSent     uint64 `json:"terminates_sent"`
	TerminatesReceived uint64 `json:"terminates_received"`
	// NAKsSent and NAKsReceived are by NAK code (NAKCodes), every code
	// present.
	NAKsSent     map[string]uint64 `json:"naks_sent"`
	NAKsReceived map[string]uint64 `json:"naks_received"`
	// Drops are by reason (DropReasons; a device's also LinkDropReasons),
	// every reason present.
	Drops map[string]uint64 `json:"drops"`
}

// scalar is one of Counters' plain counts: its key (JSON, text, and the
// Prometheus metric softrdma_{device,qp}_KEY_total) and what it counts.
type scalar struct {
	key, help string
	get       func(*Counters) *uint64
}

var scalars = []scalar{
	{"packets_out", "Packets sent (RoCE: transport packets, BTH to pad; iWARP: FPDUs).", func(c *Counters) *uint64 { return &c.PacketsOut }},
	{"bytes_out", "Bytes sent (RoCE: BTH to pad; iWARP: ULPDU_Length to CRC).", func(c *Counters) *uint64 { return &c.BytesOut }},
	{"packets_in", "Packets received by a QP.", func(c *Counters) *uint64 { return &c.PacketsIn }},
	{"bytes_in", "Bytes received by a QP.", func(c *Counters) *uint64 { return &c.BytesIn }},
	{"retransmissions", "Request packets sent again (go-back-N).", func(c *Counters) *uint64 { return &c.Retransmissions }},
	{"timeouts", "Expiries of the retransmission timer.", func(c *Counters) *uint64 { return &c.Timeouts }},
	{"probes", "Tail-loss probes: the last packet sent again with AckReq.", func(c *Counters) *uint64 { return &c.Probes }},
	{"acks_sent", "Acknowledge packets sent with an ACK syndrome.", func(c *Counters) *uint64 { return &c.AcksSent }},
	{"acks_received", "Acknowledge packets received with an ACK syndrome.", func(c *Counters) *uint64 { return &c.AcksReceived }},
	{"rnr_naks_sent", "RNR NAKs sent (no receive posted).", func(c *Counters) *uint64 { return &c.RNRNAKsSent }},
	{"rnr_naks_received", "RNR NAKs received.", func(c *Counters) *uint64 { return &c.RNRNAKsReceived }},
	{"duplicate_requests", "Duplicate requests the responder answered or dropped.", func(c *Counters) *uint64 { return &c.DuplicateRequests }},
	{"duplicate_responses", "Responses for PSNs already acknowledged.", func(c *Counters) *uint64 { return &c.DuplicateResponses }},
	{"terminates_sent", "iWARP Terminate messages sent.", func(c *Counters) *uint64 { return &c.TerminatesSent }},
	{"terminates_received", "iWARP Terminate messages received.", func(c *Counters) *uint64 { return &c.TerminatesReceived }},
}

// NAKCodes are the keys of NAKsSent and NAKsReceived: the NAK codes of IBTA
// Vol. 1 Table 43, in code order (0 to 4).
var NAKCodes = []string{"psn_sequence_error", "invalid_request", "remote_access_error", "remote_operational_error", "invalid_rd_request"}

// DropReasons are the engine's drop reasons (ibtransport.DropReason, in
// order) as keys: "out_of_sequence", "no_receive_wqe", ...
var DropReasons = func() []string {
	keys := make([]string, ibtransport.NumDropReasons)
	for i := range keys {
		keys[i] = Key(ibtransport.DropReason(i).String())
	}
	return keys
}()

// LinkDropReasons are a RoCE device's own drop reasons (roce.DeviceCounters):
// frames that are not RoCE, RoCE frames with bad lengths, for an address
// not the device's, with a bad ICRC or IPv4 checksum; output packets that
// could not be routed, whose next hop did not resolve, or whose write failed.
var LinkDropReasons = []string{"not_roce", "malformed_frame", "not_for_us", "bad_icrc", "bad_ip_checksum", "unroutable", "unresolved", "write_errors"}

// Key turns a name into a snake_case key: lower case, each run of other
// characters than letters and digits one '_' ("P_Key mismatch" is
// "p_key_mismatch", "unknown QP" "unknown_qp").
func Key(name string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.TrimSpace(name) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if under && b.Len() > 0 {
				b.WriteByte('_')
			}
			under = false
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		under = true
	}
	return b.String()
}

// newCounters returns Counters with every NAK code and drop reason present
// (zero), the device's link reasons too if link.
func newCounters(link bool) Counters {
	c := Counters{NAKsSent: map[string]uint64{}, NAKsReceived: map[string]uint64{}, Drops: map[string]uint64{}}
	for _, k := range NAKCodes {
		c.NAKsSent[k], c.NAKsReceived[k] = 0, 0
	}
	for _, k := range DropReasons {
		c.Drops[k] = 0
	}
	if link {
		for _, k := range LinkDropReasons {
			c.Drops[k] = 0
		}
	}
	return c
}

// FromQP converts the engine's counters.
func FromQP(k ibtransport.QPCounters) Counters {
	c := newCounters(false)
	c.add(k)
	return c
}

// add adds the engine's counters k to c.
func (c *Counters) add(k ibtransport.QPCounters) {
	c.PacketsOut += k.PacketsOut
	c.BytesOut += k.BytesOut
	c.PacketsIn += k.PacketsIn
	c.BytesIn += k.BytesIn
	c.Retransmissions += k.Retransmissions
	c.Timeouts += k.Timeouts
	c.Probes += k.Probes
	c.AcksSent += k.AcksSent
	c.AcksReceived += k.AcksReceived
	c.RNRNAKsSent += k.RNRNAKsSent
	c.RNRNAKsReceived += k.RNRNAKsReceived
	c.DuplicateRequests += k.DuplicateRequests
	c.DuplicateResponses += k.DuplicateResponses
	c.TerminatesSent += k.TerminatesSent
	c.TerminatesReceived += k.TerminatesReceived
	for i, k2 := range NAKCodes {
		c.NAKsSent[k2] += k.NAKsSent[i]
		c.NAKsReceived[k2] += k.NAKsReceived[i]
	}
	for i, r := range DropReasons {
		c.Drops[r] += k.Drops[i]
	}
}

// Info names a device for Collect.
type Info struct {
	Name      string
	Transport string // "roce" or "iwarp"
	Address   netip.Addr
}

// Collect takes a snapshot of the device whose engine is ctx (and, for a
// RoCE device, whose frame counts are link; nil otherwise), State "active".
func Collect(info Info, ctx *ibtransport.Context, link *roce.DeviceCounters) Device {
	d := Device{Name: info.Name, Transport: info.Transport, State: "active", Counters: newCounters(link != nil), QPs: []QP{}}
	if info.Address.IsValid() {
		d.Address = info.Address.String()
	}
	live, retired := ctx.QPStats()
	d.Counters.add(retired)
	for _, s := range live {
		d.Counters.add(s.Counters)
		d.QPs = append(d.QPs, QP{QPN: s.QPN, Type: s.Type.String(), State: s.State.String(), DestQPN: s.DestQPN, Counters: FromQP(s.Counters)})
	}
	cc := ctx.Counters()
	// A packet of the engine's malformed and unknown_qp never reached a
	// QP: the QPs' drops do not have them.
	d.Counters.Drops[DropReasons[ibtransport.DropMalformed]] += cc.Malformed
	d.Counters.Drops[DropReasons[ibtransport.DropUnknownQP]] += cc.UnknownQP
	if link != nil {
		d.Link = &Link{FramesIn: link.FramesIn, FramesOut: link.FramesOut, Neighbor: link.Neighbor, Queued: link.Queued}
		for k, n := range map[string]uint64{
			"not_roce": link.NotRoCE, "malformed_frame": link.Malformed, "not_for_us": link.NotForUs,
			"bad_icrc": link.BadICRC, "bad_ip_checksum": link.BadIPChecksum, "unroutable": link.Unroutable,
			"unresolved": link.Unresolved, "write_errors": link.WriteErrors,
		} {
			d.Counters.Drops[k] += n
		}
	}
	return d
}

// Only returns s with the devices named in names (all of them when names
// is empty), in s's order.
func (s Snapshot) Only(names []string) Snapshot {
	if len(names) == 0 {
		return s
	}
	out := s
	out.Devices = []Device{}
	for _, d := range s.Devices {
		for _, n := range names {
			if d.Name == n {
				out.Devices = append(out.Devices, d)
				break
			}
		}
	}
	return out
}
