package roce_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// rewritingClock is a capture's clock that, once armed, rewrites buf each
// time the capture takes a timestamp: the capture asks for one as it records
// what the device writes, after the device sealed it (the ICRC computed) and
// let go of the engine's lock. It stands for what may run then: the device's
// input goroutine scattering a received SEND into the memory a packet is sent
// from (a buffer both sent from and received into, as ibv_rc_pingpong's, which
// verbs allows), or the application reusing a completed buffer.
type rewritingClock struct {
	buf   []byte
	armed bool
}

func (c *rewritingClock) Now() time.Time {
	if c.armed {
		for i := range c.buf {
			c.buf[i]++
		}
	}
	return time.Now()
}

// TestCaptureRecordsSealedPayload: a RoCE device's capture records each
// frame it sends as it was sealed, the payload its ICRC was computed over,
// whatever happens to the memory region afterwards: every frame a sent
// verifies. (With the payload gathered from the memory region, the capture
// copied it after the seal, outside the engine's lock: it recorded frames whose
// ICRC did not verify, and under -race the copy raced with the input path's
// scatter into the same memory, as TestPingpongRxDepth/rc-r1 with --pcap
// reported.)
func TestCaptureRecordsSealedPayload(t *testing.T) {
	ipA, ipB := netip.MustParseAddr("127.0.75.21"), netip.MustParseAddr("127.0.75.22")
	const port = 24793
	var capA bytes.Buffer
	clk := &rewritingClock{}
	open := func(ip netip.Addr, seed uint64, capture bool) *roce.Device {
		ep, err := netio.NewUDP(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(ip, port)})
		if err != nil {
			t.Skipf("cannot open a UDP socket on %v: %v", ip, err)
		}
		t.Cleanup(func() { ep.Close() })
		var dep netio.Link = ep
		if capture {
			if dep, err = netio.NewCapture(netio.NewUDPFrames(ep, [6]byte{}, [6]byte{}), &capA, netio.FormatPcap, clk); err != nil {
				t.Fatal(err)
			}
		}
		d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: dep, Addrs: []netip.Addr{ip}, UDPPort: port,
			Engine: ibtransport.ContextConfig{Seed: seed}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := open(ipA, 1, true), open(ipB, 2, false)
	qa, cqa, mra := setupQP(t, a)
	qb, _, mrb := setupQP(t, b)
	connect(t, a, qa, qb, ipB, 100, 200)
	connect(t, b, qb, qa, ipA, 200, 100)
	const size = 8 << 10 // 8 packets at path MTU 1024
	clk.buf = mra.Buf()[:size]
	clk.armed = true
	wr := ibtransport.SendWR{Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{mra.SGE(0, size)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	wc := make([]ibtransport.WC, 1)
	for deadline := time.Now().Add(30 * time.Second); cqa.Poll(wc) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no completion in 30 s")
		}
		now := time.Now()
		if _, err := a.Poll(now); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Poll(now); err != nil {
			t.Fatal(err)
		}
	}
	clk.armed = false
	if err := a.Endpoint().(netio.CaptureEndpoint).Flush(); err != nil {
		t.Fatal(err)
	}
	sent := 0
	for i, fr := range readCapture(t, &capA) {
		var f roce.Frame
		if err := f.DecodeEthernetPort(fr, port); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Src != ipA {
			continue
		}
		sent++
		if err := roce.VerifyICRC(&f); err != nil {
			t.Errorf("sent frame %d as captured: %v", i, err)
		}
	}
	if sent < size/1024 {
		t.Errorf("%d frames of a in the capture, want at least %d", sent, size/1024)
	}
}
