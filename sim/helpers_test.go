package sim

import (
	"encoding/binary"
	"testing"
	"time"
)

func testMAC(i int) [6]byte { return [6]byte{0x02, 0, 0, 0, 0, byte(i)} }

var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// testFrame builds an Ethernet frame of size bytes (at least 18) from src to
// dst carrying seq in bytes 14..18; the rest is a pattern derived from seq.
func testFrame(dst, src [6]byte, seq uint32, size int) []byte {
	f := make([]byte, size)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], 0x88b5) // IEEE local experimental
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := 18; i < size; i++ {
		f[i] = byte(seq) ^ byte(i)
	}
	return f
}

func frameSeq(f []byte) uint32 { return binary.BigEndian.Uint32(f[14:18]) }

// arrival is one frame observed at a port.
type arrival struct {
	port string
	at   time.Duration // since Epoch
	seq  uint32
	data string
}

// recorder drains ports as frames are delivered and logs what arrived.
type recorder struct {
	t    testing.TB
	n    *Network
	got  []arrival
	bufs [][]byte
	szs  []int
}

func newRecorder(t testing.TB, n *Network, ports ...*Port) *recorder {
	r := &recorder{t: t, n: n, szs: make([]int, 16)}
	for range 16 {
		r.bufs = append(r.bufs, make([]byte, 10000))
	}
	for _, p := range ports {
		p.OnReceive(func() { r.drain(p) })
	}
	return r
}

func (r *recorder) drain(p *Port) {
	for {
		k, err := p.TryRead(r.bufs, r.szs, 0)
		if err != nil {
			r.t.Errorf("TryRead(%s): %v", p.Name(), err)
			return
		}
		if k == 0 {
			return
		}
		now := r.n.Now().Sub(Epoch)
		for i := 0; i < k; i++ {
			f := r.bufs[i][:r.szs[i]]
			r.got = append(r.got, arrival{p.Name(), now, frameSeq(f), string(f)})
		}
	}
}

func (r *recorder) seqs(port string) []uint32 {
	var s []uint32
	for _, a := range r.got {
		if a.port == port {
			s = append(s, a.seq)
		}
	}
	return s
}

// pair returns a network with two connected nodes.
func pair(seed uint64, cfg LinkConfig) (*Network, *Port, *Port, *Link) {
	n := New(seed)
	a := n.AddNode("a", testMAC(1))
	b := n.AddNode("b", testMAC(2))
	return n, a, b, n.Connect(a, b, cfg)
}

// sendN writes count frames of size bytes from p to dst, one per Write, all
// at the current time, with sequence numbers from first.
func sendN(t testing.TB, p *Port, dst [6]byte, first uint32, count, size int) {
	t.Helper()
	for i := 0; i < count; i++ {
		if _, err := p.Write([][]byte{testFrame(dst, p.MAC(), first+uint32(i), size)}, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func runAll(n *Network) int {
	k := 0
	for n.Step() {
		k++
	}
	return k
}
