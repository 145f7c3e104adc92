package ibtransport_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestStateReport checks that StateReport tells the two ways an RC SEND
// waits apart, as a person reading a hung program's report needs: a receiver
// with no receive posted (the requester in an RNR wait, the responder sending
// RNR NAKs with an empty receive queue: the perftest -R hang of the CI, where
// the server's QP was not the one the client's handshake was for) and a
// packet lost on the wire (the timer armed, the responder's NAK and the
// packets it dropped out of sequence, the requester's retransmissions); and,
// once the receive is posted, the queues empty.
func TestStateReport(t *testing.T) {
	p := newRC(t)
	a, b := p.A, p.B
	buf := make([]byte, 4096)
	mr := regMR(t, a.PD, buf, ib.AccessLocalWrite)
	rbuf := make([]byte, 4096)
	rmr := regMR(t, b.PD, rbuf, ib.AccessLocalWrite)
	send := func(id uint64, n uint32) {
		post(t, a.QP, ib.SendWR{WRID: id, Opcode: ib.WRSend, Signaled: true,
			SGL: []ib.SGE{{Addr: mr.Addr(), Length: n, LKey: mr.LKey()}}})
	}
	recv := func(id uint64) {
		postRecv(t, b.QP, ib.RecvWR{WRID: id, SGL: []ib.SGE{{Addr: rmr.Addr(), Length: 4096, LKey: rmr.LKey()}}})
	}
	qpLine := func(c *ib.Context, qpn uint32) string {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^qp 0x%06x .*(\n  .*)*`, qpn))
		return re.FindString(c.StateReport(p.Wire.Clock.Now()))
	}
	steps := []struct {
		name  string
		act   func()
		aWant []string // regexps A's QP line must match
		bWant []string // and B's
	}{
		{"no receive posted", func() {
			send(1, 16)
			p.Wire.RunFor(5*time.Millisecond, 100000)
		}, []string{`RC RTS dest 0x`, `sq 1 posted`, `rnr wait true`, `RNR NAKs sent 0 received [1-9]`, `timeouts 0`},
			[]string{`rq 0;`, `RNR NAKs sent [1-9][0-9]* received 0`}},
		{"receive posted", func() {
			recv(9)
			complete(t, p, b.CQ, 1)
			complete(t, p, a.CQ, 1)
		}, []string{`sq 0 posted 0 unsent`, `timer off`, `rnr wait false`}, []string{`rq 0;`}},
		{"first packet of three lost", func() {
			recv(10)
			drop := true
			p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
				if f.Dir == ibtest.AToB && drop {
					drop = false
					return ibtest.Action{Drop: true}
				}
				return ibtest.Action{}
			}
			send(2, 3000) // 3 packets of MTU 1024
			p.Wire.Pump()
		}, []string{`sq 1 posted 0 unsent`, `timer [0-9.]+m?s,`, `timeouts 0, probes 0,`},
			[]string{`NAKs sent \[1 0 0 0 0\]`, `(?m)^  dropped \(out of sequence\): 2$`}},
		{"resent after the NAK", func() {
			complete(t, p, a.CQ, 1)
		}, []string{`sq 0 posted`, `timer off`, `timeouts 0, probes 0,`, `NAKs sent \[0 0 0 0 0\] received \[1 0 0 0 0\]`}, nil},
	}
	for _, s := range steps {
		s.act()
		for _, side := range []struct {
			ctx  *ib.Context
			qpn  uint32
			want []string
		}{{a.Ctx, a.QP.QPN(), s.aWant}, {b.Ctx, b.QP.QPN(), s.bWant}} {
			line := qpLine(side.ctx, side.qpn)
			for _, w := range side.want {
				if !regexp.MustCompile(w).MatchString(line) {
					t.Errorf("%s: QP 0x%x: no %q in\n%s", s.name, side.qpn, w, line)
				}
			}
		}
	}
}
