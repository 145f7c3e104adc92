package conform

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// The tests in this file run the catalogue against deliberately broken peers:
// the in-process softrdma peer with a Fault that edits what it sends or
// receives, or that ignores its configuration. Each fault must make the cases
// listed for it fail (with the bytes seen where a packet was wrong), and every
// case of the catalogue must be failed by at least one fault: no case passes
// whatever the peer does.

// aeth returns the AETH of an Acknowledge or READ response First/Last/Only
// packet, or nil.
func aeth(pkt []byte) ib.AETH {
	var p ib.Packet
	if p.Decode(pkt) != nil {
		return nil
	}
	return p.AETH
}

func isNAK(pkt []byte) bool {
	a := aeth(pkt)
	return ib.BTH(pkt).Opcode() == ib.OpcodeRCAcknowledge && a != nil && a.Syndrome().Kind() != ib.AETHKindACK
}

// reexecuteDuplicates makes the peer treat exact duplicates of requests as new
// ones: it moves their PSN to the next one expected.
func reexecuteDuplicates() *Fault {
	seen := map[string]bool{}
	next := map[uint32]uint32{}
	return &Fault{Name: "re-executes duplicate requests", In: func(pkt []byte) bool {
		b := ib.BTH(pkt)
		op := b.Opcode()
		if op.Service() != ib.ServiceRC || !op.IsRequest() {
			return true
		}
		qp := b.DestQP()
		if key := string(pkt); seen[key] {
			b.SetPSN(next[qp])
		} else {
			seen[key] = true
		}
		n := 1
		if op == ib.OpcodeRCRDMAReadRequest {
			var p ib.Packet
			if p.Decode(pkt) == nil {
				n = max(1, int(p.RETH.DMALen()+1023)/1024)
			}
		}
		if end := ib.PSNAdd(b.PSN(), n); ib.PSNLess(next[qp], end) || next[qp] == 0 {
			next[qp] = end
		}
		return true
	}}
}

type faultCase struct {
	fault *Fault
	cfg   SelfConfig
	fails []string // case IDs that must fail
	// seen lists cases whose failure must show the offending packet.
	seen []string
}

func faultTable() []faultCase {
	nakCases := []string{"rc.psn.gap", "rc.psn.gap-once", "rc.access.rkey", "rc.access.bounds-write",
		"rc.access.bounds-read", "rc.access.mr-rights", "rc.access.qp-rights", "rc.atomic.misaligned",
		"rc.seq.middle", "rc.seq.last-missing", "rc.len.oversize", "rc.len.first-short", "rc.pad.write",
		"rc.recv.too-long"}
	return []faultCase{
		{fault: &Fault{Name: "NAK PSN off by one", Out: func(pkt []byte) bool {
			if isNAK(pkt) {
				ib.BTH(pkt).SetPSN(ib.PSNAdd(ib.BTH(pkt).PSN(), 1))
			}
			return true
		}}, fails: append(nakCases, "rc.rnr.send", "rc.rnr.write-imm"), seen: []string{"rc.psn.gap", "rc.access.rkey", "rc.rnr.send"}},
		{fault: &Fault{Name: "wrong NAK code", Out: func(pkt []byte) bool {
			if a := aeth(pkt); isNAK(pkt) && a.Syndrome().Kind() == ib.AETHKindNAK {
				swap := map[ib.NAKCode]ib.NAKCode{ib.NAKPSNSequenceError: ib.NAKInvalidRequest,
					ib.NAKInvalidRequest: ib.NAKRemoteAccessError, ib.NAKRemoteAccessError: ib.NAKRemoteOperationalError}
				a.SetSyndrome(ib.NewNAKSyndrome(swap[a.Syndrome().NAKCode()]))
			}
			return true
		}}, fails: nakCases, seen: []string{"rc.access.bounds-read", "rc.pad.write"}},
		{fault: &Fault{Name: "drops its NAKs", Out: func(pkt []byte) bool { return !isNAK(pkt) }},
			fails: append(nakCases, "rc.rnr.send", "rc.rnr.write-imm")},
		{fault: &Fault{Name: "RNR timer off by one", Out: func(pkt []byte) bool {
			if a := aeth(pkt); isNAK(pkt) && a.Syndrome().Kind() == ib.AETHKindRNRNAK {
				a.SetSyndrome(ib.NewRNRNAKSyndrome(a.Syndrome().RNRTimer() + 1))
			}
			return true
		}}, fails: []string{"rc.rnr.send", "rc.rnr.write-imm"}, seen: []string{"rc.rnr.send"}},
		{fault: reexecuteDuplicates(),
			fails: []string{"rc.dup.send", "rc.dup.write", "rc.dup.read", "rc.dup.fetch-add", "rc.dup.cmp-swap"},
			seen:  []string{"rc.dup.send", "rc.dup.fetch-add", "rc.dup.cmp-swap"}},
		{fault: &Fault{Name: "accepts bad ICRCs", AcceptBadICRC: true}, fails: []string{"roce.icrc.bad"}, seen: []string{"roce.icrc.bad"}},
		{fault: &Fault{Name: "sends bad ICRCs", BreakICRC: true}, fails: []string{"roce.icrc.answers", "rc.psn.gap", "rc.dup.read"},
			seen: []string{"roce.icrc.answers"}},
		{fault: &Fault{Name: "ignores the P_Key", In: func(pkt []byte) bool {
			ib.BTH(pkt).SetPKey(0xffff)
			return true
		}}, fails: []string{"rc.pkey.wrong", "ud.pkey.wrong"}, seen: []string{"rc.pkey.wrong"}},
		{fault: &Fault{Name: "ignores the Q_Key", In: func(pkt []byte) bool {
			if ib.BTH(pkt).Opcode() == ib.OpcodeUDSendOnly {
				ib.DETH(pkt[ib.BTHLen:]).SetQKey(0x1ce1ce1c)
			}
			return true
		}}, fails: []string{"ud.qkey.wrong"}},
		{fault: &Fault{Name: "ignores TVer", In: func(pkt []byte) bool {
			ib.BTH(pkt).SetTVer(0)
			return true
		}}, fails: []string{"rc.tver.bad"}, seen: []string{"rc.tver.bad"}},
		{fault: func() *Fault {
			var last uint32
			return &Fault{Name: "delivers to unknown QPs", In: func(pkt []byte) bool {
				b := ib.BTH(pkt)
				if b.DestQP() == 0xfffffe {
					b.SetDestQP(last)
				} else {
					last = b.DestQP()
				}
				return true
			}}
		}(), fails: []string{"rc.qpn.unknown"}, seen: []string{"rc.qpn.unknown"}},
		{fault: &Fault{Name: "MSN off by one", Out: func(pkt []byte) bool {
			if a := aeth(pkt); a != nil {
				a.SetMSN(a.MSN() + 1)
			}
			return true
		}}, fails: []string{"rc.ack.coalesce", "rc.ack.msn-read", "rc.dup.send", "rc.read.multi", "rc.read.zero-len", "rc.psn.gap"},
			seen: []string{"rc.ack.coalesce", "rc.ack.msn-read"}},
		{fault: &Fault{Name: "promises 32768 credits", Out: func(pkt []byte) bool {
			if a := aeth(pkt); a != nil && a.Syndrome().Kind() == ib.AETHKindACK {
				a.SetSyndrome(ib.NewACKSyndrome(30))
			}
			return true
		}}, fails: []string{"rc.ack.credits"}, seen: []string{"rc.ack.credits"}},
		{fault: &Fault{Name: "corrupts READ response data", Out: func(pkt []byte) bool {
			var p ib.Packet
			if p.Decode(pkt) == nil && p.Opcode() >= ib.OpcodeRCRDMAReadResponseFirst &&
				p.Opcode() <= ib.OpcodeRCRDMAReadResponseOnly && len(p.Payload) > 0 {
				p.Payload[0] ^= 0xff
			}
			return true
		}}, fails: []string{"rc.read.multi", "rc.dup.read"}, seen: []string{"rc.read.multi"}},
		{fault: &Fault{Name: "checks R_Keys of zero-length requests", In: func(pkt []byte) bool {
			var p ib.Packet
			if p.Decode(pkt) == nil && p.RETH != nil && p.RETH.DMALen() == 0 {
				p.RETH.SetDMALen(4)
			}
			return true
		}}, fails: []string{"rc.write.zero-len", "rc.read.zero-len"}, seen: []string{"rc.write.zero-len", "rc.read.zero-len"}},
		{fault: &Fault{Name: "takes a WRITE for a SEND", In: func(pkt []byte) bool {
			if ib.BTH(pkt).Opcode() == ib.OpcodeRCRDMAWriteOnly {
				ib.BTH(pkt).SetOpcode(ib.OpcodeRCSendOnly)
			}
			return true
		}}, fails: []string{"rc.write.recv-untouched"}},
		{fault: &Fault{Name: "corrupts UD payloads", In: func(pkt []byte) bool {
			if ib.BTH(pkt).Opcode() == ib.OpcodeUDSendOnly && len(pkt) > ib.BTHLen+ib.DETHLen {
				pkt[ib.BTHLen+ib.DETHLen] ^= 0xff
			}
			return true
		}}, fails: []string{"ud.recv.grh"}},
		{fault: &Fault{Name: "claims a smaller MTU than it has", ReportPathMTU: 1024},
			cfg: SelfConfig{MTU: 9000, Engine: ib.ContextConfig{PortMTU: 2048}}, fails: []string{"ud.len.oversize"}},
		{fault: &Fault{Name: "ignores the QP's timeout and RNR timer", EditQP: func(s *QPSpec) {
			if s.Timeout > 0 {
				s.Timeout = 8
			}
			s.MinRNRTimer = 1
		}}, fails: []string{"rc.req.timeout", "rc.rnr.send", "rc.rnr.write-imm"}, seen: []string{"rc.req.timeout", "rc.rnr.send"}},
		{fault: &Fault{Name: "goes back too far after a NAK", In: func(pkt []byte) bool {
			if isNAK(pkt) && aeth(pkt).Syndrome() == ib.NewNAKSyndrome(ib.NAKPSNSequenceError) {
				ib.BTH(pkt).SetPSN(ib.PSNAdd(ib.BTH(pkt).PSN(), -1))
			}
			return true
		}}, fails: []string{"rc.req.nak-seq"}, seen: []string{"rc.req.nak-seq"}},
		{fault: &Fault{Name: "waits too little after an RNR NAK", In: func(pkt []byte) bool {
			if a := aeth(pkt); isNAK(pkt) && a.Syndrome().Kind() == ib.AETHKindRNRNAK {
				a.SetSyndrome(ib.NewRNRNAKSyndrome(1))
			}
			return true
		}}, fails: []string{"rc.req.rnr"}, seen: []string{"rc.req.rnr"}},
		{fault: &Fault{Name: "takes an ACK for the one before", In: func(pkt []byte) bool {
			if a := aeth(pkt); ib.BTH(pkt).Opcode() == ib.OpcodeRCAcknowledge && a.Syndrome().Kind() == ib.AETHKindACK {
				ib.BTH(pkt).SetPSN(ib.PSNAdd(ib.BTH(pkt).PSN(), -1))
			}
			return true
		}}, fails: []string{"rc.req.implicit-ack"}},
		{fault: &Fault{Name: "corrupts received READ responses", In: func(pkt []byte) bool {
			var p ib.Packet
			if p.Decode(pkt) == nil && p.Opcode() == ib.OpcodeRCRDMAReadResponseMiddle {
				binary.BigEndian.PutUint32(p.Payload, 0xdeadbeef)
			}
			return true
		}}, fails: []string{"rc.req.read-resp"}},
	}
}

// TestBrokenPeers runs each fault's cases and checks they fail, and that every
// case is failed by some fault.
func TestBrokenPeers(t *testing.T) {
	covered := map[string]bool{}
	for _, fc := range faultTable() {
		t.Run(strings.ReplaceAll(fc.fault.Name, " ", "_"), func(t *testing.T) {
			cfg := fc.cfg
			cfg.Seed, cfg.Fault = 11, fc.fault
			s, err := NewSelfRoCE(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r := &Runner{Suite: "roce", Peer: fc.fault.Name, Cases: RoCECases(s.Env), Pattern: strings.Join(fc.fails, ",")}
			rep, err := r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Cases) != len(fc.fails) {
				t.Fatalf("ran %d cases, want %d (unknown IDs in %v?)", len(rep.Cases), len(fc.fails), fc.fails)
			}
			mustSee := map[string]bool{}
			for _, id := range fc.seen {
				mustSee[id] = true
			}
			for _, c := range rep.Cases {
				if c.Result != Fail {
					t.Errorf("%s passed against a peer that %s: %s", c.ID, fc.fault.Name, c.Reason)
					continue
				}
				covered[c.ID] = true
				if mustSee[c.ID] {
					if len(c.Seen) == 0 {
						t.Errorf("%s failed without the bytes seen: %s", c.ID, c.Reason)
					}
					for _, h := range c.Seen {
						if _, err := hex.DecodeString(h); err != nil || h == "" {
							t.Errorf("%s: seen %q is not hex bytes", c.ID, h)
						}
					}
				}
				t.Logf("%s: %s", c.ID, c.Reason)
			}
		})
	}
	for _, c := range RoCECases(nil) {
		if !covered[c.ID] {
			t.Errorf("no broken peer makes %s fail", c.ID)
		}
	}
}
