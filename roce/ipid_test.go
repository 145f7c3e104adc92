package roce

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestRecoverIPv4ID zeroes the IPv4 ID of every captured RoCEv2-over-IPv4 frame
// (what a UDP socket backend sees) and recovers rxe's real ID from the ICRC.
func TestRecoverIPv4ID(t *testing.T) {
	frames := 0
	for _, name := range captureNames(t, "rxe-") {
		for i, raw := range readCapture(t, name) {
			var f Frame
			if f.DecodeEthernet(raw) != nil || f.IPv6 {
				continue
			}
			want := binary.BigEndian.Uint16(f.IP[4:])
			b := bytes.Clone(raw)
			var g Frame
			if err := g.DecodeEthernet(b); err != nil {
				t.Fatal(err)
			}
			g.IP[4], g.IP[5] = 0, 0
			got, ok := RecoverIPv4ID(&g)
			if !ok || got != want {
				t.Fatalf("%s frame %d: recovered ID %#04x (ok %v), want %#04x", name, i+1, got, ok, want)
			}
			frames++
		}
	}
	if frames < 400 {
		t.Fatalf("only %d IPv4 RoCE frames checked", frames)
	}
}

// TestRecoverIPv4IDRejectsCorruption flips one random covered bit (outside the
// ID and the masked fields) in captured frames: recovery must fail for all but
// about 2^-16 of them.
func TestRecoverIPv4IDRejectsCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	raw := readCapture(t, "rxe-write-bw.pcap")
	var frames [][]byte
	for _, r := range raw {
		var f Frame
		if f.DecodeEthernet(r) == nil {
			frames = append(frames, r)
		}
	}
	accepted, trials := 0, 20000
	for range trials {
		b := bytes.Clone(frames[rng.IntN(len(frames))])
		var f Frame
		if err := f.DecodeEthernet(b); err != nil {
			t.Fatal(err)
		}
		f.IP[4], f.IP[5] = 0, 0
		// Flip a bit in the IB packet (BTH byte 4 is masked: skip it).
		for {
			off := rng.IntN(len(f.IB))
			if off == 4 {
				continue
			}
			f.IB[off] ^= 1 << rng.IntN(8)
			break
		}
		if _, ok := RecoverIPv4ID(&f); ok {
			accepted++
		}
	}
	if accepted > 3 {
		t.Fatalf("%d of %d corrupted frames yielded an ID; want about %d", accepted, trials, trials>>16)
	}
}

func TestRecoverIPv4IDAllocs(t *testing.T) {
	raw := readCapture(t, "rxe-write-bw.pcap")
	var f Frame
	for _, r := range raw {
		if f.DecodeEthernet(r) == nil {
			break
		}
	}
	if n := testing.AllocsPerRun(100, func() { RecoverIPv4ID(&f) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkRecoverIPv4ID(b *testing.B) {
	raw := readCapture(b, "rxe-write-bw.pcap")
	var f Frame
	for _, r := range raw {
		if f.DecodeEthernet(r) == nil && len(f.IB) > 1000 {
			break
		}
	}
	b.SetBytes(int64(len(f.IB)))
	for b.Loop() {
		RecoverIPv4ID(&f)
	}
}
