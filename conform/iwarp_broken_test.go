package conform

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/iwarp"
)

// isTerminate reports whether a DDP segment is a Terminate.
func isTerminate(seg []byte) bool {
	d, err := iwarp.ParseDDP(seg)
	return err == nil && !d.Tagged() && iwarp.RDMAP(d).Opcode() == iwarp.OpTerminate && len(d.Payload()) >= 4
}

// The Terminate message's octets within its DDP segment (after the 18-octet
// untagged header): layer/etype, error code, flags.
const termOff = iwarp.DDPUntaggedHeaderLen

func iwarpFaultTable() []struct {
	fault *IWARPFault
	fails []string
	seen  []string
} {
	termCases := []string{"mpa.fpdu.bad-crc", "ddp.version.untagged", "ddp.version.tagged", "ddp.qn.invalid",
		"ddp.msn.range", "ddp.msn.no-buffer", "ddp.mo.invalid", "ddp.too-long", "ddp.stag.invalid", "ddp.stag.bounds",
		"rdmap.version", "rdmap.opcode.reserved", "rdmap.opcode.model", "rdmap.write.rights", "rdmap.read.stag",
		"rdmap.read.bounds", "rdmap.terminate.header", "rdmap.terminate.close"}
	corrupt := func(op iwarp.Opcode) func([]byte) bool {
		return func(seg []byte) bool {
			d, err := iwarp.ParseDDP(seg)
			if err == nil && iwarp.RDMAP(d).Opcode() == op && len(d.Payload()) > 0 {
				d.Payload()[0] ^= 0xff
			}
			return true
		}
	}
	return []struct {
		fault *IWARPFault
		fails []string
		seen  []string
	}{
		{&IWARPFault{Name: "wrong Terminate code", Out: func(seg []byte) bool {
			if isTerminate(seg) {
				seg[termOff+1] ^= 0x01
			}
			return true
		}}, termCases, []string{"ddp.qn.invalid", "rdmap.read.stag", "mpa.fpdu.bad-crc"}},
		{&IWARPFault{Name: "Terminate from the wrong layer", Out: func(seg []byte) bool {
			if isTerminate(seg) {
				seg[termOff] = (seg[termOff]+0x10)%0x30 | seg[termOff]&0x0f
			}
			return true
		}}, termCases, []string{"ddp.stag.invalid"}},
		{&IWARPFault{Name: "drops its Terminates", Out: func(seg []byte) bool { return !isTerminate(seg) }}, termCases, nil},
		{&IWARPFault{Name: "accepts bad CRCs", AcceptBadCRC: true}, []string{"mpa.fpdu.bad-crc"}, nil},
		{&IWARPFault{Name: "sends bad CRCs", BreakCRC: true}, []string{"mpa.crc.used", "mpa.crc.unused", "ddp.qn.invalid"},
			[]string{"mpa.crc.used", "mpa.crc.unused"}},
		{&IWARPFault{Name: "rejects everything", Reply: func(f iwarp.MPAFrame) { f.SetReject(true) }},
			[]string{"mpa.reply.accept", "mpa.reply.rev1", "rdmap.read.response", "ddp.msn.range"}, []string{"mpa.reply.accept"}},
		{&IWARPFault{Name: "answers in revision 1 only", Reply: func(f iwarp.MPAFrame) { f.SetRevision(1) }},
			[]string{"mpa.reply.accept"}, []string{"mpa.reply.accept"}},
		{&IWARPFault{Name: "answers in revision 2 only", Reply: func(f iwarp.MPAFrame) { f.SetRevision(2); f.SetEnhanced(true) }},
			[]string{"mpa.reply.rev1"}, []string{"mpa.reply.rev1"}},
		{&IWARPFault{Name: "grants too large an ORD", Reply: func(f iwarp.MPAFrame) {
			if w, ok := f.IRDORD(); ok {
				w.SetORD(9)
			}
		}}, []string{"mpa.reply.accept"}, []string{"mpa.reply.accept"}},
		{&IWARPFault{Name: "accepts any start frame", ForgeReply: true}, []string{"mpa.req.bad-key", "mpa.req.pd-too-long"},
			[]string{"mpa.req.bad-key", "mpa.req.pd-too-long"}},
		{&IWARPFault{Name: "corrupts Read Responses", Out: corrupt(iwarp.OpReadResponse)}, []string{"rdmap.read.response"},
			[]string{"rdmap.read.response"}},
		{&IWARPFault{Name: "corrupts Writes it receives", In: corrupt(iwarp.OpWrite)}, []string{"rdmap.write.place"},
			[]string{"rdmap.write.place"}},
		{&IWARPFault{Name: "corrupts Sends it receives", In: corrupt(iwarp.OpSend)}, []string{"rdmap.send.deliver"},
			[]string{"rdmap.send.deliver"}},
		{&IWARPFault{Name: "counts Writes in the MSN", In: func(seg []byte) bool {
			if d, err := iwarp.ParseDDP(seg); err == nil && !d.Tagged() && iwarp.RDMAP(d).Opcode() == iwarp.OpSend {
				d.SetMSN(d.MSN() + 1)
			}
			return true
		}}, []string{"rdmap.send.after-write", "rdmap.send.deliver"}, nil},
		{&IWARPFault{Name: "omits the DDP header from Terminates", Out: func(seg []byte) bool {
			if isTerminate(seg) {
				seg[termOff+2] &^= iwarp.TerminateFlagD
			}
			return true
		}}, []string{"rdmap.terminate.header"}, []string{"rdmap.terminate.header"}},
		{&IWARPFault{Name: "keeps the stream open after a Terminate", KeepOpen: true}, []string{"rdmap.terminate.close"}, nil},
	}
}

// TestBrokenIWARPPeers: each fault makes its cases fail, and every iWARP case is
// failed by some fault.
func TestBrokenIWARPPeers(t *testing.T) {
	covered := map[string]bool{}
	for _, fc := range iwarpFaultTable() {
		t.Run(strings.ReplaceAll(fc.fault.Name, " ", "_"), func(t *testing.T) {
			s := newSelfIWARP(t, fc.fault)
			s.Env.AnswerTimeout = 300 * time.Millisecond
			rep, err := (&Runner{Suite: "iwarp", Peer: fc.fault.Name, Cases: IWARPCases(s.Env),
				Pattern: strings.Join(fc.fails, ",")}).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Cases) != len(fc.fails) {
				t.Fatalf("ran %d cases, want %d", len(rep.Cases), len(fc.fails))
			}
			mustSee := map[string]bool{}
			for _, id := range fc.seen {
				mustSee[id] = true
			}
			for _, c := range rep.Cases {
				if c.Result != Fail {
					t.Errorf("%s %s against a peer that %s: %s", c.ID, c.Result, fc.fault.Name, c.Reason)
					continue
				}
				if strings.HasPrefix(c.Reason, "setup:") {
					t.Errorf("%s failed in its setup, not on the peer's answer: %s", c.ID, c.Reason)
				}
				covered[c.ID] = true
				if mustSee[c.ID] && len(c.Seen) == 0 {
					t.Errorf("%s failed without the bytes seen: %s", c.ID, c.Reason)
				}
				t.Logf("%s: %s", c.ID, c.Reason)
			}
		})
	}
	for _, c := range IWARPCases(nil) {
		if !covered[c.ID] {
			t.Errorf("no broken peer makes %s fail", c.ID)
		}
	}
}
