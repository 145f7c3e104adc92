package verbsdev_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/devspec"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// wireTarget is testdata/wiretarget running on softrdma's library: RC QPs
// whose peer is the test, on the wire.
type wireTarget struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	// addr, rkey and rkey2 are the region's address, its R_Key, and the
	// R_Key of the same memory in another PD; qpn[i] is QP i's number.
	addr        uint64
	rkey, rkey2 uint32
	qpn         []uint32
}

// startWireTarget starts wiretarget on a RoCE device at dev whose QPs'
// peer is peer, and reads its QPs.
func startWireTarget(t *testing.T, lib, prog, dev, peer string) *wireTarget {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, prog, peer)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"=roce:"+dev)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &wireTarget{cmd: cmd, stdin: stdin, lines: make(chan string, 256)}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			w.lines <- s.Text()
		}
		close(w.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("wiretarget: %v (it must outlive every packet)\n%s", err, stderr.String())
		}
	})
	for {
		l := w.line(t)
		f := strings.Fields(l)
		switch {
		case l == "ready":
			return w
		case len(f) == 4 && f[0] == "mr":
			w.addr, _ = strconv.ParseUint(f[1], 10, 64)
			k, _ := strconv.ParseUint(f[2], 10, 32)
			k2, _ := strconv.ParseUint(f[3], 10, 32)
			w.rkey, w.rkey2 = uint32(k), uint32(k2)
		case len(f) == 3 && f[0] == "qp":
			n, _ := strconv.ParseUint(f[2], 10, 32)
			w.qpn = append(w.qpn, uint32(n))
		default:
			t.Fatalf("wiretarget: %q", l)
		}
	}
}

// line returns the program's next line (bounded: a silent program fails).
func (w *wireTarget) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			t.Fatal("wiretarget exited")
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("wiretarget said nothing for 30 s")
	}
	return ""
}

// ask sends a command and returns the first line that starts with prefix;
// completions printed before it are returned too.
func (w *wireTarget) ask(t *testing.T, cmd, prefix string) (answer string, wcs []string) {
	t.Helper()
	fmt.Fprintln(w.stdin, cmd)
	for {
		l := w.line(t)
		if strings.HasPrefix(l, prefix) {
			return l, wcs
		}
		wcs = append(wcs, l)
	}
}

// wc waits for the program's next completion line.
func (w *wireTarget) wc(t *testing.T) string {
	t.Helper()
	for {
		if l := w.line(t); strings.HasPrefix(l, "wc ") {
			return l
		}
	}
}

// wireCase is one QP's exchange: the hostile packets, then the check.
type wireCase struct {
	name string
	// bad returns the packets that test QP qpn (the target's QP i), raw a
	// frame that no Packet can describe.
	bad func(w *wireTarget, i int) []*conform.Packet
	raw func(w *wireTarget, i int) []byte
	// answer is the NAK code wanted in answer to the last bad packet, or
	// -1 for none (the packets are dropped: the good SEND that follows is
	// the next thing answered).
	answer int
	// then is what must follow on the program's side.
	then string
}

// TestWireHostile plays the peer of a C program's RC QPs (testdata/wiretarget
// on softrdma's library) with packets of its own making, malformed and
// adversarial: a bad ICRC, a wrong P_Key, a bad TVer, datagrams shorter
// than a BTH or of garbage, a WRITE cut inside its RETH, a PSN ahead (NAK PSN
// sequence error) or so far ahead it is behind (a duplicate), a WRITE
// beyond the region or with the R_Key of another PD (NAK remote access
// error: the QP goes to the error state and flushes its receives), a
// zero-byte WRITE with a bad R_Key (IBTA C9-88: acknowledged), an ACK for a
// PSN the QP never sent. The program must see what rxe's users see (the
// completions, or none), and live through all of it; the region's bytes past
// its end are never written.
func TestWireHostile(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "wiretarget")
	n := randomNet()
	devIP, peerIP := netip.MustParseAddr(n+"1"), netip.MustParseAddr(n+"2")
	dev, err := roce.Open(roce.OpenConfig{Backend: roce.BackendUDP, Addrs: []netip.Addr{peerIP}, UDPPort: roce.UDPPort})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	link := conform.NewEndpointLink(netio.FramesOf(dev.Endpoint(), dev.MAC(), [6]byte{}))
	defer link.Close()
	wire, err := conform.NewWire(conform.WireConfig{Link: link, LocalIP: peerIP, PeerIP: devIP, UDPSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	w := startWireTarget(t, lib, prog, devIP.String(), peerIP.String())
	if os.Getenv("WIRETRACE") != "" { // every packet in the log, to debug a case
		wire.Trace = func(dir string, c *conform.Captured) { t.Logf("%s %x err %v", dir, c.IB, c.Err) }
	}

	send := func(qpn, psn uint32, payload string) *conform.Packet {
		return conform.NewPacket(ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCSendOnly, PKey: 0xffff,
			DestQP: qpn, AckReq: true, PSN: psn}}, []byte(payload))
	}
	write := func(qpn, psn uint32, va uint64, rkey uint32, n int) *conform.Packet {
		return conform.NewPacket(ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCRDMAWriteOnly, PKey: 0xffff,
			DestQP: qpn, AckReq: true, PSN: psn}, RETH: ib.RETHFields{VA: va, RKey: rkey, DMALen: uint32(n)}},
			bytes.Repeat([]byte{0xab}, n))
	}
	const psn0 = 1000 // each QP's responder PSN (wiretarget)
	cases := []wireCase{
		{name: "bad ICRC", bad: func(w *wireTarget, i int) []*conform.Packet {
			p := send(w.qpn[i], psn0, "bad icrc")
			p.BadICRC = true
			return []*conform.Packet{p}
		}, answer: -1},
		{name: "wrong P_Key", bad: func(w *wireTarget, i int) []*conform.Packet {
			p := send(w.qpn[i], psn0, "wrong pkey")
			p.Fields.BTH.PKey = 0x1234
			return []*conform.Packet{p}
		}, answer: -1},
		{name: "TVer 1", bad: func(w *wireTarget, i int) []*conform.Packet {
			p := send(w.qpn[i], psn0, "tver")
			p.Fields.BTH.TVer = 1
			return []*conform.Packet{p}
		}, answer: -1},
		{name: "WRITE cut inside its RETH", raw: func(w *wireTarget, i int) []byte {
			// A SEND Only of 4 bytes retyped a WRITE Only (ICRC made again):
			// the opcode says a 16-byte RETH follows, 4 bytes do.
			frame, _, err := wire.Build(send(w.qpn[i], psn0, "cut!"))
			if err != nil {
				t.Fatal(err)
			}
			var f roce.Frame
			if err := f.DecodeEthernet(frame); err != nil {
				t.Fatal(err)
			}
			f.IB[0] = byte(ib.OpcodeRCRDMAWriteOnly)
			roce.SetICRC(&f)
			return frame
		}, answer: -1},
		{name: "PSN 1000 ahead", bad: func(w *wireTarget, i int) []*conform.Packet {
			return []*conform.Packet{send(w.qpn[i], psn0+1000, "ahead")}
		}, answer: int(ib.NAKPSNSequenceError)},
		{name: "PSN 2^23+1 ahead: behind, a duplicate", bad: func(w *wireTarget, i int) []*conform.Packet {
			return []*conform.Packet{send(w.qpn[i], (psn0+1<<23+1)&0xffffff, "duplicate")}
		}, answer: -1},
		{name: "zero-byte WRITE with a bad R_Key", bad: func(w *wireTarget, i int) []*conform.Packet {
			return []*conform.Packet{write(w.qpn[i], psn0, 0, 0xdead00, 0)}
		}, answer: 0x100 /* ACK */},
		{name: "WRITE past the region", bad: func(w *wireTarget, i int) []*conform.Packet {
			return []*conform.Packet{write(w.qpn[i], psn0, w.addr+65536-8, w.rkey, 64)}
		}, answer: int(ib.NAKRemoteAccessError), then: "flushed"},
		{name: "WRITE with the R_Key of another PD", bad: func(w *wireTarget, i int) []*conform.Packet {
			return []*conform.Packet{write(w.qpn[i], psn0, w.addr, w.rkey2, 64)}
		}, answer: int(ib.NAKRemoteAccessError), then: "flushed"},
		{name: "ACK for a PSN never sent", bad: func(w *wireTarget, i int) []*conform.Packet {
			return []*conform.Packet{conform.NewPacket(ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCAcknowledge,
				PKey: 0xffff, DestQP: w.qpn[i], PSN: 5100}, AETH: ib.AETHFields{Syndrome: 0x1f, MSN: 7}}, nil)}
		}, answer: -1},
	}
	if len(cases) > len(w.qpn) {
		t.Fatalf("%d cases for %d QPs", len(cases), len(w.qpn))
	}
	answer := func(i int) *conform.Captured {
		c, err := wire.Next(time.Now().Add(20*time.Second), conform.ToQP(0x100+uint32(i)))
		if err != nil {
			t.Fatalf("QP %d: no answer: %v", i, err)
		}
		return c
	}
	// Garbage and a datagram shorter than a BTH, to the RoCE port: nothing
	// answers them, and every case below still works.
	junk, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(devIP, roce.UDPPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	for _, b := range [][]byte{{0xde, 0xad}, []byte("not a RoCE packet at all, just bytes to port 4791")} {
		if _, err := junk.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.raw != nil {
				if err := link.WriteFrame(c.raw(w, i)); err != nil {
					t.Fatal(err)
				}
			} else {
				for _, p := range c.bad(w, i) {
					if _, _, err := wire.Send(p); err != nil {
						t.Fatal(err)
					}
				}
			}
			next := uint32(psn0)
			if c.answer >= 0 {
				a := answer(i)
				s := a.Pkt.AETH.Syndrome()
				switch {
				case c.answer == 0x100:
					if s.Kind() != ib.AETHKindACK || a.Pkt.BTH.PSN() != psn0 {
						t.Fatalf("answer %s PSN %d, want an ACK of PSN %d", s, a.Pkt.BTH.PSN(), psn0)
					}
					next = psn0 + 1
				case s.Kind() != ib.AETHKindNAK || int(s.NAKCode()) != c.answer || a.Pkt.BTH.PSN() != psn0:
					t.Fatalf("answer %s PSN %d, want NAK code %d PSN %d", s, a.Pkt.BTH.PSN(), c.answer, psn0)
				}
			}
			if c.then == "flushed" {
				// IBTA 9.9.3 (class C responder error) and rxe: the QP goes
				// to the error state, its receives are flushed.
				for k := 0; k < 4; k++ {
					if l, want := w.wc(t), fmt.Sprintf("wc qp=%d wr=%d status=%d ", i, i*100+k, 5); !strings.HasPrefix(l, want) {
						t.Fatalf("got %q, want %q... (IBV_WC_WR_FLUSH_ERR)", l, want)
					}
				}
				if st, _ := w.ask(t, fmt.Sprintf("state %d", i), "state"); st != fmt.Sprintf("state %d 6", i) {
					t.Errorf("%q, want the QP in ERR (6)", st)
				}
				return
			}
			// The QP still works: a good SEND at the PSN it expects is
			// acknowledged and lands in its first receive, with no
			// completion before it.
			if _, _, err := wire.Send(send(w.qpn[i], next, "good 16 bytes!!!")); err != nil {
				t.Fatal(err)
			}
			for {
				a := answer(i)
				if a.Pkt.BTH.Opcode() == ib.OpcodeRCAcknowledge && a.Pkt.AETH.Syndrome().Kind() == ib.AETHKindACK &&
					a.Pkt.BTH.PSN() == next {
					break
				}
			}
			if l, want := w.wc(t), fmt.Sprintf("wc qp=%d wr=%d status=0 opcode=%d len=16", i, i*100, 128); l != want {
				t.Fatalf("got %q, want %q", l, want)
			}
			// And it sends: its SEND (PSN 5000) arrives and, acknowledged,
			// completes.
			if st, _ := w.ask(t, fmt.Sprintf("send %d", i), "posted"); st != fmt.Sprintf("posted %d 0", i) {
				t.Fatalf("%q", st)
			}
			req := answer(i)
			if req.Pkt.BTH.Opcode() != ib.OpcodeRCSendOnly || req.Pkt.BTH.PSN() != 5000 {
				t.Fatalf("the QP sent %s PSN %d, want a SEND Only of PSN 5000", req.Pkt.BTH.Opcode(), req.Pkt.BTH.PSN())
			}
			if _, _, err := wire.Send(conform.NewPacket(ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCAcknowledge,
				PKey: 0xffff, DestQP: w.qpn[i], PSN: 5000}, AETH: ib.AETHFields{Syndrome: 0x1f, MSN: 1}}, nil)); err != nil {
				t.Fatal(err)
			}
			if l, want := w.wc(t), fmt.Sprintf("wc qp=%d wr=%d status=0 opcode=0 len=", i, 9000+i); !strings.HasPrefix(l, want) {
				t.Fatalf("got %q, want %q...", l, want)
			}
		})
	}
	// The WRITE that began 8 bytes before the region's end and ran past it
	// was refused whole: not even its first 8 bytes, inside the region, were
	// written (the bytes after the region are not the program's to show).
	if b, _ := w.ask(t, "byte 65528", "byte"); b != "byte 65528 0" {
		t.Errorf("%q: the WRITE past the region wrote its first bytes", b)
	}
}
