package test

// The network of the soak test: several softrdma RoCEv2 devices, each on its
// own faulty cable to one learning switch of the simulator, and the pieces
// that connect QPs between any two of them and drive them all at once.

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// soakNet is N nodes on one switch.
type soakNet struct {
	t     testing.TB
	net   *sim.Network
	sw    *sim.Switch
	nodes []*simNode
	ports []*sim.Port
	links []*sim.Link
	devs  []sim.Stepped
}

// soakLink is node k's cable to the switch: the base link with a mix of every
// fault the simulator has, a little different per node. A frame crosses two
// cables, so its odds of meeting a fault are about twice these.
func soakLink(k int) sim.LinkConfig {
	c := baseLink()
	c.Jitter = 2 * time.Microsecond
	c.Loss = 0.01 + 0.005*float64(k%3)
	c.Duplicate = 0.01
	c.Reorder, c.ReorderDelay = 0.02, 15*time.Microsecond
	c.Corrupt = 0.005 + 0.005*float64(k%2)
	return c
}

func newSoakNet(t testing.TB, seed uint64, nodes int) *soakNet {
	t.Helper()
	sn := &soakNet{t: t, net: sim.New(seed)}
	sn.sw = sn.net.AddSwitch("sw")
	nbrs := roce.StaticNeighbors{}
	macs := make([][6]byte, nodes)
	ips := make([]netip.Addr, nodes)
	for k := range nodes {
		macs[k] = [6]byte{0x02, 0x53, 0x4b, 0, 0, byte(k + 1)}
		ips[k] = netip.AddrFrom4([4]byte{10, 0, 1, byte(k + 1)})
		nbrs[ips[k]] = macs[k]
	}
	for k := range nodes {
		name := string(rune('a' + k))
		port := sn.net.AddNode(name, macs[k])
		sn.links = append(sn.links, sn.net.ConnectSwitch(port, sn.sw, soakLink(k)))
		nd := newSimNode(t, name, port, macs[k], ips[k], nbrs, seed*16+uint64(k)+1)
		sn.nodes = append(sn.nodes, nd)
		sn.ports = append(sn.ports, port)
		sn.devs = append(sn.devs, nd.dev)
	}
	return sn
}

// portOf returns n's port.
func (sn *soakNet) portOf(n *simNode) *sim.Port {
	for k, x := range sn.nodes {
		if x == n {
			return sn.ports[k]
		}
	}
	panic("soak: node not in the network")
}

// view is the two-node harness seen from x and y, so that the rcStream
// machinery (which knows one pair) runs on the soak network. Its drive and
// settle step only x and y: the soak test drives and settles the whole network
// first, so that they find nothing left to do.
func (sn *soakNet) view(x, y *simNode) *simPair {
	return &simPair{t: sn.t, net: sn.net, pa: sn.portOf(x), pb: sn.portOf(y), a: x, b: y}
}

// quiet reports whether nothing is left to happen anywhere.
func (sn *soakNet) quiet() bool {
	if _, ev := sn.net.NextEventTime(); ev {
		return false
	}
	for k, n := range sn.nodes {
		if _, d := n.dev.NextDeadline(); d || sn.ports[k].Queued() > 0 || n.ctx.HasOutput() {
			return false
		}
	}
	return true
}

// drive runs every device until done (see sim.Network.Drive).
func (sn *soakNet) drive(limit time.Duration, done func() bool, step func(time.Time) bool) error {
	return sn.net.Drive(limit, done, step, sn.devs...)
}

// settle drives until nothing is left: every duplicate, late frame and
// retransmission delivered and answered.
func (sn *soakNet) settle(limit time.Duration) error {
	if err := sn.drive(limit, sn.quiet, nil); err != nil && err != sim.ErrStalled {
		return err
	}
	return nil
}

// connectRC connects an RC QP on x to one on y with first PSNs psnX and psnY
// (each with its own send and receive CQ, as connectRC of the pair harness).
func (sn *soakNet) connectRC(x, y *simNode, prm rcParams, psnX, psnY uint32) *rcConn {
	t := sn.t
	t.Helper()
	if prm.Access == 0 {
		prm.Access = allRemote
	}
	cqDepth := 2*prm.Depth + 64
	c := &rcConn{na: x, nb: y, prm: prm,
		aS: x.newCQ(t, cqDepth), aR: x.newCQ(t, cqDepth), bS: y.newCQ(t, cqDepth), bR: y.newCQ(t, cqDepth)}
	c.qa, c.qb = x.newRCQP(t, prm.Depth, c.aS, c.aR), y.newRCQP(t, prm.Depth, c.bS, c.bR)
	v := sn.view(x, y)
	v.bringUp(x, c.qa, y.ip, c.qb.QPN(), psnY, psnX, prm)
	v.bringUp(y, c.qb, x.ip, c.qa.QPN(), psnX, psnY, prm)
	return c
}

// destroy takes a connection down for good: both QPs to ERR (nothing may be
// outstanding, so nothing may complete), then the QPs and their CQs.
func (c *rcConn) destroy() error {
	for _, qp := range []*ib.QP{c.qa, c.qb} {
		if err := qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); err != nil {
			return err
		}
	}
	var wc [4]ib.WC
	for _, cq := range []*ib.CQ{c.aS, c.aR, c.bS, c.bR} {
		if n := cq.Poll(wc[:]); n > 0 {
			return fmt.Errorf("%d completions after the connection went idle to ERR, first %v", n, wc[0])
		}
	}
	return destroyAll([]*ib.QP{c.qa, c.qb}, []*ib.CQ{c.aS, c.aR, c.bS, c.bR})
}

// destroyAll destroys the QPs, then the CQs.
func destroyAll(qps []*ib.QP, cqs []*ib.CQ) error {
	for _, qp := range qps {
		if err := qp.Destroy(); err != nil {
			return err
		}
	}
	for _, cq := range cqs {
		if err := cq.Destroy(); err != nil {
			return err
		}
	}
	return nil
}

// deregAll deregisters memory regions.
func deregAll(mrs ...*ib.MR) error {
	for _, mr := range mrs {
		if err := mr.Dereg(); err != nil {
			return err
		}
	}
	return nil
}

// modifyStep is one QP modification.
type modifyStep struct {
	attr ib.QPAttr
	mask ib.QPAttrMask
}

// modifySteps applies a sequence of QP modifications.
func modifySteps(qp *ib.QP, steps ...modifyStep) error {
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return err
		}
	}
	return nil
}

// flushRecvs moves qp to ERR and checks that its receives from next on, and
// no others, complete on cq with IBV_WC_WR_FLUSH_ERR, once each, in order.
func flushRecvs(n *simNode, qp *ib.QP, cq *ib.CQ, next, posted int) error {
	if err := qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); err != nil {
		return err
	}
	for {
		wcs := n.poll(cq)
		if len(wcs) == 0 {
			break
		}
		for _, wc := range wcs {
			if wc.WRID != uint64(next) || wc.Status != ib.WCWRFlushErr || next >= posted {
				return fmt.Errorf("after ERR: %v, want recv wr %d of %d flushed", wc, next, posted)
			}
			next++
		}
	}
	if next != posted {
		return fmt.Errorf("%d of %d receives completed or flushed: the rest were lost", next, posted)
	}
	return nil
}
