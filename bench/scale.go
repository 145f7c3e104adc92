package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
)

// The scale rows (issue 22): n RC QP pairs between the two devices, each
// moving 4 KiB WRITEs, and how the cost grows with n. For each n, three rows:
//
//   - "WRITE bw n QPs": the aggregate bandwidth of all n QPs, beside the raw
//     path's (as the 4 KiB WRITE bw row);
//   - "setup n QPs": QP pairs set up per second, each pair's QPs created and
//     connected as the bench connects them (RoCE: both QPs moved to RTS
//     directly, no CM; iWARP: an MPA dial and accept over a TCP connection),
//     its memory region registered and its CQs shared;
//   - "memory n QPs": heap bytes per QP pair once set up (both ends, the
//     4 KiB target region of each pair included), in KiB;
//   - "cm setup n QPs" (cmrate.go): QP pairs connected per second through
//     rdma_cm.
//
// One goroutine drives every QP through one send CQ on B: the bench adds no
// goroutine per QP, so what grows with n is the transport's.

// scaleSize is the WRITE size of the scale rows.
const scaleSize = 4096

// scaleInFlight is the WRITEs in flight in all, spread over the QPs (at
// least one each): the 4 KiB WRITE bw row's depth at n = 1.
const scaleInFlight = txDepth

// scale is the n QP pairs of one scale measurement.
type scale struct {
	e          *env
	pdA, pdB   *ibtransport.PD
	cqA, cqB   *ibtransport.CQ // shared by every QP of the side
	mrA, mrB   *ibtransport.MR
	qa, qb     []*ibtransport.QP
	disconnect []func()
	depth      int // WRITEs in flight per QP
}

// newScale sets up n QP pairs, stopping at the first error.
func (e *env) newScale(n int) (*scale, error) {
	s := &scale{e: e, pdA: e.a.AllocPD(), pdB: e.b.AllocPD(), depth: max(1, scaleInFlight/n)}
	var err error
	if s.cqA, err = e.a.CreateCQ(64); err != nil {
		s.destroy()
		return nil, err
	}
	if s.cqB, err = e.b.CreateCQ(n*s.depth + 64); err != nil {
		s.destroy()
		return nil, err
	}
	const access = ibtransport.AccessLocalWrite | ibtransport.AccessRemoteWrite
	if s.mrA, err = s.pdA.RegMR(make([]byte, n*scaleSize), access); err != nil {
		s.destroy()
		return nil, err
	}
	if s.mrB, err = s.pdB.RegMR(make([]byte, scaleSize), access); err != nil {
		s.destroy()
		return nil, err
	}
	qcap := ibtransport.QPCap{MaxSendWR: s.depth + 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	for i := 0; i < n; i++ {
		qa, err := e.a.CreateQP(s.pdA, ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: s.cqA, RecvCQ: s.cqA, Cap: qcap})
		if err != nil {
			s.destroy()
			return nil, fmt.Errorf("QP %d of %d: %w", i+1, n, err)
		}
		s.qa = append(s.qa, qa)
		qb, err := e.b.CreateQP(s.pdB, ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: s.cqB, RecvCQ: s.cqB, Cap: qcap})
		if err != nil {
			s.destroy()
			return nil, fmt.Errorf("QP %d of %d: %w", i+1, n, err)
		}
		s.qb = append(s.qb, qb)
		d, err := e.connect(qa, qb)
		if err != nil {
			s.destroy()
			return nil, fmt.Errorf("connecting QP pair %d of %d: %w", i+1, n, err)
		}
		s.disconnect = append(s.disconnect, d)
	}
	return s, nil
}

func (s *scale) destroy() {
	for _, d := range s.disconnect {
		d()
	}
	for _, qp := range append(s.qa, s.qb...) {
		qp.Destroy()
	}
	for _, mr := range []*ibtransport.MR{s.mrA, s.mrB} {
		if mr != nil {
			mr.Dereg()
		}
	}
	for _, cq := range []*ibtransport.CQ{s.cqA, s.cqB} {
		if cq != nil {
			cq.Destroy()
		}
	}
}

// stream keeps s.depth WRITEs in flight on every QP for warm+measure, then
// drains, and returns the WRITEs that completed in the measured part.
func (s *scale) stream(warm, measure time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), warm+measure+drainLimit)
	defer cancel()
	sge := []ibtransport.SGE{s.mrB.SGE(0, scaleSize)}
	wr := ibtransport.SendWR{Opcode: ibtransport.WRRDMAWrite, SGL: sge, Signaled: true, RKey: s.mrA.RKey()}
	post := func(i int) error {
		wr.WRID = uint64(i)
		wr.RemoteAddr = s.mrA.Addr() + uint64(i*scaleSize)
		return s.qb[i].PostSend(wr)
	}
	outstanding := 0
	for i := range s.qb {
		for k := 0; k < s.depth; k++ {
			if err := post(i); err != nil {
				return 0, err
			}
			outstanding++
		}
	}
	w := newWindow(warm, measure)
	wc := make([]ibtransport.WC, 64)
	msgs := 0
	for outstanding > 0 {
		n := s.cqB.Poll(wc)
		if n == 0 {
			if err := s.cqB.Wait(ctx); err != nil {
				return msgs, fmt.Errorf("%w (%d WRITEs outstanding)", err, outstanding)
			}
			continue
		}
		t := time.Now()
		for _, c := range wc[:n] {
			outstanding--
			if c.Status != ibtransport.WCSuccess {
				return msgs, fmt.Errorf("WRITE completion: %v", c.Status)
			}
			if w.in(t) {
				msgs++
			}
			if t.Before(w.to) {
				if err := post(int(c.WRID)); err != nil {
					return msgs, err
				}
				outstanding++
			}
		}
	}
	return msgs, nil
}

// heap returns the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// scaleRows measures the three scale rows of n QP pairs.
func (e *env) scaleRows(n int, o *Options) []Row {
	bw := e.row(fmt.Sprintf("WRITE bw %d QPs", n), scaleSize, "MiB/s")
	setup := e.row(fmt.Sprintf("setup %d QPs", n), 0, "QPs/s")
	mem := e.row(fmt.Sprintf("memory %d QPs", n), 0, "KiB/QP")
	setup.Baseline = "none: QP pairs created and connected per second"
	mem.Baseline = "none: heap per QP pair, both ends, its 4 KiB region included"
	rows := []Row{bw, setup, mem}
	fail := func(what string, err error) []Row {
		for i := range rows {
			rows[i] = failed(rows[i], what, err)
		}
		return rows
	}
	heap0 := heap()
	t0 := time.Now()
	s, err := e.newScale(n)
	if err != nil {
		return fail("setup", err)
	}
	defer s.destroy()
	secs := time.Since(t0).Seconds()
	heap1 := heap()
	rows[1].Value, rows[1].Samples = float64(n)/secs, n
	if heap1 > heap0 {
		rows[2].Value = float64(heap1-heap0) / float64(n) / 1024
	}
	rows[2].Samples = n

	payload := min(scaleSize, e.pathMTU)
	unit := scaleSize
	if e.transport == "roce" {
		unit = e.dataPacketLen("write", payload, scaleSize > e.pathMTU)
	} else {
		payload = scaleSize
	}
	r := &rows[0]
	r.Baseline = e.raw.blastDesc(unit, false)
	var baseSecs, measured float64
	for i := 0; i < rounds; i++ {
		warm, measure := o.round(i)
		if !o.NoBaseline {
			k, err := e.raw.blast(unit, false, warm, measure)
			if err != nil {
				return fail("baseline", err)
			}
			r.BaseCount += k
			baseSecs += measure.Seconds()
		}
		k, err := s.stream(warm, measure)
		if err != nil {
			rows[0] = failed(rows[0], "softrdma", err)
			return rows
		}
		r.Samples += k
		measured += measure.Seconds()
	}
	r.Value = float64(r.Samples) * scaleSize / (1 << 20) / measured
	if baseSecs > 0 {
		r.Base = float64(r.BaseCount) * float64(payload) / (1 << 20) / baseSecs
	}
	r.Ratio = ratio(r.Value, r.Base)
	return rows
}
