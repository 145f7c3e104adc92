package roce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestRecoverIPv4ID zeroes the IPv4 ID of every captured RoCEv2-over-IPv4 frame
// (what a UDP socket backend sees) and recovers rxe's real ID from the ICRC.
func TestRecoverIPv4ID(t *testing.T) {
	forEachZeroIDFrame(t, func(name string, i int, raw []byte, f, g *Frame) {
		want := binary.BigEndian.Uint16(f.IP[4:])
		got, ok := RecoverIPv4ID(g)
		if !ok || got != want {
			t.Fatalf("%s frame %d: recovered ID %#04x (ok %v), want %#04x", name, i+1, got, ok, want)
		}
	})
}

// forEachZeroIDFrame calls fn for every captured RoCEv2-over-IPv4 frame of
// rxe: f decoded from the capture, g from a copy (b) whose IPv4 ID is zero, as
// a UDP socket backend or a GSO sender sees it. It fails the test if fewer
// than 400 frames were seen.
func forEachZeroIDFrame(t *testing.T, fn func(name string, i int, b []byte, f, g *Frame)) {
	t.Helper()
	frames := 0
	for _, name := range captureNames(t, "rxe-") {
		for i, raw := range readCapture(t, name) {
			var f Frame
			if f.DecodeEthernet(raw) != nil || f.IPv6 {
				continue
			}
			b := bytes.Clone(raw)
			var g Frame
			if err := g.DecodeEthernet(b); err != nil {
				t.Fatal(err)
			}
			g.IP[4], g.IP[5] = 0, 0
			fn(name, i, b, &f, &g)
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

// xPow[k] is x^(8·2^k) modulo the polynomial: 2^k zero bytes.
var xPow = func() (t [32]uint32) {
	t[0] = 1 << (31 - 8) // x^8 (x^0 is the top bit)
	for k := 1; k < len(t); k++ {
		t[k] = multModP(t[k-1], t[k-1])
	}
	return t
}()

// shifts (for the tests: the device no longer shifts forward) remembers x^8n for recent lengths, as unshifts does x^-8n.
var shifts = powCache{pow: &xPow}

// shift returns d multiplied by x^8n: what a CRC register difference d
// becomes after n more bytes that do not differ.
func shift(d uint32, n int) uint32 { return shifts.mul(d, n) }

// TestPowCacheTables checks that the byte-wise tables a length earns
// multiply as the bit loop does, and that shift and unshift undo each other.
func TestPowCacheTables(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 1040 + 18, 65507} {
		for i := 0; i < 3*mulTableAfter; i++ { // past the table's creation
			d := rng.Uint32()
			s := shift(d, n)
			if u := unshift(s, n); u != d {
				t.Fatalf("n %d: unshift(shift(%#x)) = %#x", n, d, u)
			}
			v := uint32(1) << 31
			for k := 0; n>>k != 0; k++ {
				if n>>k&1 != 0 {
					v = multModP(v, xPow[k])
				}
			}
			if want := multModP(v, d); s != want {
				t.Fatalf("n %d: shift(%#x) = %#x, want %#x", n, d, s, want)
			}
		}
	}
}

// TestPowCacheConcurrent has goroutines multiply through one cache with more
// lengths than it has slots, so that slots change hands and tables are
// built while others read them: every product must be the bit loop's (with
// -race, also that nothing is read unsynchronised).
func TestPowCacheConcurrent(t *testing.T) {
	c := &powCache{pow: &xPow}
	lengths := []int{18, 84, 96, 1058, 1074, 1040 + 18, 4096, 9000, 12, 65507, 3, 700}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := range 20000 {
				// Mostly a few hot lengths (they earn tables), now and
				// then others that push them out of their slots.
				n := lengths[i%3]
				if rng.IntN(8) == 0 {
					n = lengths[rng.IntN(len(lengths))]
				}
				d := rng.Uint32()
				if got, want := c.mul(d, n), multModP(c.power(n), d); got != want {
					errs <- fmt.Errorf("n %d: %#x times x^8n = %#x, want %#x", n, d, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := c.mul(0x1234, 0); got != 0x1234 {
		t.Errorf("n 0: %#x, want d unchanged", got)
	}
}
