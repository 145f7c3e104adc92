package ibtransport_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// inFlight follows the window a requester uses, as seen on the wire: how far
// past the highest acknowledged PSN each request packet is (the window bounds
// it), peaked per phase: before the first resend, from it until the next
// acknowledgement, and from 200 frames after it on.
type inFlight struct {
	high, acked uint32 // highest request PSN sent, highest acknowledged
	started     bool
	resendFrame int    // index of the first resent frame (0: none yet)
	resendAcked uint32 // acked when it was sent
	peak        [3]int32
}

func (f *inFlight) observe(fr *ibtest.Frame) {
	var pk ib.Packet
	if pk.Decode(fr.Data) != nil {
		return
	}
	psn := pk.BTH.PSN()
	switch fr.Dir {
	case ibtest.AToB:
		if !f.started {
			f.high, f.acked, f.started = psn, ib.PSNAdd(psn, -1), true
		}
		if f.resendFrame == 0 && ib.PSNLess(psn, f.high) {
			f.resendFrame, f.resendAcked = fr.Index, f.acked
		}
		if ib.PSNLess(f.high, psn) {
			f.high = psn
		}
		phase := 0
		switch {
		case f.resendFrame == 0:
		case f.acked == f.resendAcked:
			phase = 1
		case fr.Index >= f.resendFrame+200:
			phase = 2
		default:
			return
		}
		f.peak[phase] = max(f.peak[phase], ib.PSNDiff(psn, f.acked))
	case ibtest.BToA:
		if pk.BTH.Opcode() != ib.OpcodeRCAcknowledge {
			return
		}
		if s := pk.AETH.Syndrome(); s.Kind() != ib.AETHKindACK {
			psn = ib.PSNAdd(psn, -1) // a sequence NAK acknowledges the PSNs before its own
		}
		if ib.PSNLess(f.acked, psn) {
			f.acked = psn
		}
	}
}

// windowSetup returns a pair whose requester's largest window is max PSNs,
// on a wire with 10 µs latency, and an n-byte source and destination.
func windowSetup(t *testing.T, max, n int) (*ibtest.Pair, *guarded, *guarded) {
	t.Helper()
	p, err := ibtest.NewPair(ib.ContextConfig{Seed: 1, MaxUnackedPSNs: max}, ib.QPTypeRC, ibtest.DefaultConnOptions())
	if err != nil {
		t.Fatal(err)
	}
	p.Wire.Latency = 10 * time.Microsecond
	src := newGuarded(t, p.A.PD, n, ib.AccessLocalWrite)
	copy(src.buf, pattern(n, 3))
	return p, src, newGuarded(t, p.B.PD, n, allAccess)
}

// TestRCWindowAfterLoss: a loss halves the requester's window (go-back-N
// resends everything past a loss, so a smaller window costs fewer resends on a
// lossy path), and acknowledged PSNs grow it back to MaxUnackedPSNs (128 here).
func TestRCWindowAfterLoss(t *testing.T) {
	const n = 600 * 1024 // 600 packets at MTU 1024
	p, src, dst := windowSetup(t, 128, n)
	var f inFlight
	p.Wire.Filter = func(fr *ibtest.Frame) ibtest.Action {
		f.observe(fr)
		return ibtest.Action{Drop: fr.Dir == ibtest.AToB && fr.Index == 200}
	}
	post(t, p.A.QP, writeWR(1, src, dst))
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
	if !bytes.Equal(dst.buf, src.buf) {
		t.Fatal("data differs")
	}
	peaks := f.peak
	if f.resendFrame == 0 {
		t.Fatal("nothing was resent")
	}
	t.Logf("PSNs past the last ACK at most: %d before the loss, %d right after, %d at the end", peaks[0], peaks[1], peaks[2])
	if peaks[0] != 128 {
		t.Errorf("before the loss up to %d PSNs outstanding, want the full window 128", peaks[0])
	}
	if peaks[1] > 64 {
		t.Errorf("after the loss up to %d PSNs outstanding, want at most half the window, 64", peaks[1])
	}
	if peaks[2] != 128 {
		t.Errorf("at the end up to %d PSNs outstanding, want the window grown back to 128", peaks[2])
	}
}

// TestRCRandomLossResends: with 10% random loss each way, a 256-packet WRITE
// completes, and the resends stay a small multiple of the packets: 1.9 per
// packet (with a fixed 128-PSN window, before the window shrank at a loss: 9.1).
func TestRCRandomLossResends(t *testing.T) {
	const n = 256 * 1024
	p, src, dst := writeSetup(t, ibtest.DefaultConnOptions(), n)
	p.Wire.Latency = 10 * time.Microsecond
	rng := rand.New(rand.NewPCG(7, 7))
	p.Wire.Filter = func(*ibtest.Frame) ibtest.Action { return ibtest.Action{Drop: rng.Float64() < 0.1} }
	for i := range 4 {
		post(t, p.A.QP, writeWR(uint64(i), src, dst))
		wantWC(t, complete(t, p, p.A.CQ, 1)[0], uint64(i), ib.WCRDMAWrite, ib.WCSuccess)
	}
	if !bytes.Equal(dst.buf, src.buf) {
		t.Fatal("data differs")
	}
	c := p.A.QP.Counters()
	per := float64(c.Retransmissions) / (4 * 256)
	t.Logf("%d resends for 1024 packets (%.1f per packet), %d timeouts", c.Retransmissions, per, c.Timeouts)
	if per > 4 {
		t.Errorf("%.1f resends per packet at 10%% loss", per)
	}
}

// TestRCWindowGrows: on a clean path an RC requester starts with rxe's window,
// 128 PSNs, and widens it by the PSNs acknowledged up to MaxUnackedPSNs (the
// default, 1024).
func TestRCWindowGrows(t *testing.T) {
	const n = 4096 * 1024 // 4096 packets
	p, src, dst := windowSetup(t, 0, n)
	first := int32(-1)
	var f inFlight
	p.Wire.Filter = func(fr *ibtest.Frame) ibtest.Action {
		f.observe(fr)
		if fr.Dir == ibtest.AToB && fr.Index == 127 {
			first = f.peak[0] // the first burst
		}
		return ibtest.Action{}
	}
	post(t, p.A.QP, writeWR(1, src, dst))
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
	if !bytes.Equal(dst.buf, src.buf) {
		t.Fatal("data differs")
	}
	t.Logf("PSNs past the last ACK at most: %d in the first burst, %d in all", first, f.peak[0])
	if first != 128 {
		t.Errorf("first burst %d PSNs, want rxe's 128", first)
	}
	if f.peak[0] != 1024 {
		t.Errorf("widest window %d PSNs, want MaxUnackedPSNs 1024", f.peak[0])
	}
}
