package roce_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// captureEndpoint is an endpoint that keeps a copy of every frame written to
// it and has nothing to read.
type captureEndpoint struct{ frames [][]byte }

func (e *captureEndpoint) Read([][]byte, []int, int) (int, error) { return 0, net.ErrClosed }
func (e *captureEndpoint) Write(bufs [][]byte, offset int) (int, error) {
	for _, b := range bufs {
		e.frames = append(e.frames, bytes.Clone(b[offset:]))
	}
	return len(bufs), nil
}
func (e *captureEndpoint) BatchSize() int { return 8 }
func (e *captureEndpoint) MTU() int       { return 1500 }
func (e *captureEndpoint) Close() error   { return nil }

// lateResolver is a neighbour table that answers pending for the next hops
// in pending; an address in learnAfter is learned right after the next
// question about it was answered pending, as neigh.Host learns from a frame
// the device's reader hands it while a flush asks its questions.
type lateResolver struct {
	mac        [6]byte
	pending    map[netip.Addr]bool
	learnAfter map[netip.Addr]bool
}

func (r *lateResolver) Resolve(_ time.Time, ip netip.Addr) ([6]byte, error) {
	if !r.pending[ip] {
		return r.mac, nil
	}
	if r.learnAfter[ip] {
		delete(r.pending, ip)
		delete(r.learnAfter, ip)
	}
	return [6]byte{}, roce.ErrNeighborPending
}

// TestDevicePendingKeepsOrder checks that frames waiting for their next hop
// leave in the order they were sent when the next hop resolves in the middle
// of a flush's pass over them: a later frame must not go while an earlier
// one to the same next hop waits. (Seen in TestOpenTAP under load: the
// reader learned the peer's MAC while Flush resolved the queued frames of a
// WRITE; the WRITE's first packet stayed, the rest went, and the responder
// dropped them as out of sequence and NAKed.) A next hop that resolved is
// not held up by another one that waits.
func TestDevicePendingKeepsOrder(t *testing.T) {
	peerA, peerB := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3")
	for _, tc := range []struct {
		name    string
		pending []netip.Addr // next hops still resolving when the WRITEs are sent
		// wantAfterLearn is how many frames the flush that learns the next
		// hops writes: peerA is learned in the middle of its pass (after its
		// first frame was answered pending), peerB (if pending) before it.
		wantAfterLearn int
	}{
		{"one next hop", []netip.Addr{peerA}, 0},
		{"other next hop resolved", []netip.Addr{peerA, peerB}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := &captureEndpoint{}
			r := &lateResolver{mac: peerMAC, pending: map[netip.Addr]bool{}, learnAfter: map[netip.Addr]bool{}}
			for _, ip := range tc.pending {
				r.pending[ip] = true
			}
			mac := [6]byte{2, 0, 0, 0, 0, 1}
			d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: ep, MAC: mac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.1")},
				Neighbors: r, Engine: ibtransport.ContextConfig{Seed: 1}})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			var peers []uint32 // the QPNs the frames go to
			for i, peerIP := range []netip.Addr{peerA, peerB} {
				qp, _, mr := setupQP(t, d)
				peer, _, _ := setupQP(t, d) // only for a QPN
				connectTimeout(t, d, qp, peer, peerIP, 1, 1, 17)
				// 3 packets at the 1024-byte path MTU.
				if err := qp.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRRDMAWrite,
					SGL: []ibtransport.SGE{mr.SGE(0, 3000)}, RemoteAddr: 0x1000, RKey: 1}); err != nil {
					t.Fatal(err)
				}
				peers = append(peers, peer.QPN())
			}
			// The first flush: the frames to the pending next hops wait.
			if _, err := d.Flush(now); err != nil {
				t.Fatal(err)
			}
			if c := d.Counters(); c.Queued != uint64(3*len(tc.pending)) {
				t.Fatalf("counters %+v: want %d frames queued", c, 3*len(tc.pending))
			}
			r.learnAfter[peerA] = true
			delete(r.pending, peerB)
			before := len(ep.frames)
			if _, err := d.Flush(now.Add(time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if got := len(ep.frames) - before; got != tc.wantAfterLearn {
				t.Errorf("the flush that learned the next hops wrote %d frames, want %d", got, tc.wantAfterLearn)
			}
			if _, err := d.Flush(now.Add(2 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			// Every frame left, each QP's in PSN order.
			next := map[uint32]uint32{peers[0]: 1, peers[1]: 1}
			for i, fr := range ep.frames {
				var f roce.Frame
				if err := f.DecodeEthernet(fr); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				bth := ibtransport.BTH(f.IB)
				qpn, psn := bth.DestQP(), bth.PSN()
				if psn != next[qpn] {
					t.Errorf("frame %d: QP %#x PSN %d, want %d", i, qpn, psn, next[qpn])
				}
				next[qpn] = psn + 1
			}
			if len(ep.frames) != 6 {
				t.Errorf("%d frames written, want 6", len(ep.frames))
			}
		})
	}
}
