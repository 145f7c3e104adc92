package ibtest

import (
	"fmt"

	"github.com/softrdma/softrdma/ibtransport"
)

// ConnOptions are the attributes Connect gives both QPs.
type ConnOptions struct {
	PathMTU     int
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MinRNRTimer uint8
	MaxRdAtomic int
	Access      ibtransport.Access
	// PSNA and PSNB are the first PSNs A and B send.
	PSNA, PSNB uint32
	// QKey is the UD Q_Key of both QPs.
	QKey uint32
}

// DefaultConnOptions returns MTU 1024 (rxe on a 1500-byte link), timeout 14
// (67 ms), 7 retries, infinite RNR retries, RNR timer 1 (10 µs), 16 outstanding
// READ/atomics, every remote right, PSNs 0x1000 and 0x2000.
func DefaultConnOptions() ConnOptions {
	return ConnOptions{
		PathMTU: 1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 16,
		Access: ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead | ibtransport.AccessRemoteAtomic,
		PSNA:   0x1000, PSNB: 0x2000, QKey: 0x11111111,
	}
}

// AddressOf returns the address handle of a wire side: its GID, with the
// Direction of packets towards it as the Opaque value.
func AddressOf(side Direction) *ibtransport.AddressHandle {
	return &ibtransport.AddressHandle{DGID: GID(side), HopLimit: 64, Opaque: side}
}

// Connect brings a (on the wire's A side) and b (B side) to RTS, connected to
// each other for RC and UC; UD QPs just get o.QKey.
func Connect(a, b *ibtransport.QP, o ConnOptions) error {
	if err := bringUp(a, b.QPN(), o.PSNB, o.PSNA, *AddressOf(BToA), o); err != nil {
		return err
	}
	return bringUp(b, a.QPN(), o.PSNA, o.PSNB, *AddressOf(AToB), o)
}

// UDToRTS moves a UD QP in RESET through INIT (port 1, P_Key index 0, Q_Key
// qkey) and RTR to RTS, sending from PSN sqpsn: the steps a UD QP takes, with
// no peer to name.
func UDToRTS(qp *ibtransport.QP, qkey, sqpsn uint32) error {
	if qp.Type() != ibtransport.QPTypeUD {
		return fmt.Errorf("UDToRTS of a %s QP", qp.Type())
	}
	return bringUp(qp, 0, 0, sqpsn, ibtransport.AddressHandle{}, ConnOptions{QKey: qkey})
}

// bringUp moves qp through INIT and RTR to RTS.
func bringUp(qp *ibtransport.QP, dest, rqpsn, sqpsn uint32, ah ibtransport.AddressHandle, o ConnOptions) error {
	attr := ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1, AccessFlags: o.Access, QKey: o.QKey}
	mask := ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort
	if qp.Type() == ibtransport.QPTypeUD {
		mask |= ibtransport.QPAttrQKey
	} else {
		mask |= ibtransport.QPAttrAccessFlags
	}
	if err := qp.Modify(&attr, mask); err != nil {
		return err
	}
	attr = ibtransport.QPAttr{QPState: ibtransport.QPStateRTR}
	mask = ibtransport.QPAttrState
	if qp.Type() != ibtransport.QPTypeUD {
		attr.AH, attr.PathMTU, attr.DestQPN, attr.RQPSN = ah, o.PathMTU, dest, rqpsn
		mask |= ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN | ibtransport.QPAttrRQPSN
	}
	if qp.Type() == ibtransport.QPTypeRC {
		attr.MaxDestRdAtomic, attr.MinRNRTimer = o.MaxRdAtomic, o.MinRNRTimer
		mask |= ibtransport.QPAttrMaxDestRdAtomic | ibtransport.QPAttrMinRNRTimer
	}
	if err := qp.Modify(&attr, mask); err != nil {
		return err
	}
	attr = ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: sqpsn}
	mask = ibtransport.QPAttrState | ibtransport.QPAttrSQPSN
	if qp.Type() == ibtransport.QPTypeRC {
		attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.MaxRdAtomic = o.Timeout, o.RetryCnt, o.RNRRetry, o.MaxRdAtomic
		mask |= ibtransport.QPAttrTimeout | ibtransport.QPAttrRetryCnt | ibtransport.QPAttrRNRRetry | ibtransport.QPAttrMaxRdAtomic
	}
	return qp.Modify(&attr, mask)
}

// Endpoint is one side of a Pair: a Context with one PD, one CQ for sends and
// receives, and one QP.
type Endpoint struct {
	Ctx *ibtransport.Context
	PD  *ibtransport.PD
	CQ  *ibtransport.CQ
	QP  *ibtransport.QP
}

// NewEndpoint creates a Context from cfg with a PD, a CQ of depth 4096 and a QP of
// type t with room for 256 WRs of 4 SGEs each way and 256 bytes of inline data.
func NewEndpoint(cfg ibtransport.ContextConfig, t ibtransport.QPType) (*Endpoint, error) {
	ctx := ibtransport.NewContext(cfg)
	pd := ctx.AllocPD()
	cq, err := ctx.CreateCQ(4096)
	if err != nil {
		return nil, err
	}
	qp, err := ctx.CreateQP(pd, ibtransport.QPInitAttr{
		Type: t, SendCQ: cq, RecvCQ: cq,
		Cap: ibtransport.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256},
	})
	if err != nil {
		return nil, err
	}
	return &Endpoint{Ctx: ctx, PD: pd, CQ: cq, QP: qp}, nil
}

// Pair is two connected endpoints on a Wire.
type Pair struct {
	Wire *Wire
	A, B *Endpoint
}

// NewPair creates two endpoints with QPs of type t (A from cfgA, B from cfgB with
// its Seed changed so that the sides differ), puts them on a wire and connects them.
func NewPair(cfg ibtransport.ContextConfig, t ibtransport.QPType, o ConnOptions) (*Pair, error) {
	a, err := NewEndpoint(cfg, t)
	if err != nil {
		return nil, err
	}
	cfg.Seed++
	b, err := NewEndpoint(cfg, t)
	if err != nil {
		return nil, err
	}
	if err := Connect(a.QP, b.QP, o); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return &Pair{Wire: NewWire(a.Ctx, b.Ctx), A: a, B: b}, nil
}

// Completions polls cq until it has n completions, running the wire between polls.
// It returns the completions, or an error if the wire went idle or too many steps
// passed first.
func (p *Pair) Completions(cq *ibtransport.CQ, n int) ([]ibtransport.WC, error) {
	var got []ibtransport.WC
	buf := make([]ibtransport.WC, 64)
	err := p.Wire.Run(func() bool {
		for len(got) < n {
			k := cq.Poll(buf[:min(len(buf), n-len(got))])
			if k == 0 {
				break
			}
			got = append(got, buf[:k]...)
		}
		return len(got) >= n
	}, 1_000_000)
	if err != nil {
		return got, fmt.Errorf("%d of %d completions: %w", len(got), n, err)
	}
	return got, nil
}
