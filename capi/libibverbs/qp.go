package main

/*
#include <stdint.h>
#include <infiniband/verbs.h>

struct sr_swr {
	uint64_t wr_id, remote_addr, compare_add, swap;
	uint32_t rkey, imm, opcode, flags, num_sge, invalidate_rkey;
	struct ibv_sge *sg;
	uintptr_t ah; // UD: the Go handle of the address handle
	uint32_t remote_qpn, remote_qkey;
	uintptr_t mw, mr; // BIND_MW (verbs_c.go)
	uint64_t mw_length;
	uint32_t mw_access;
};
struct sr_rwr {
	uint64_t wr_id;
	uint32_t num_sge;
	struct ibv_sge *sg;
};
struct sr_wc {
	uint64_t wr_id;
	uint32_t status, opcode, byte_len, imm, qp_num, src_qp, flags, pkey_index, invalidated_rkey;
};
struct sr_qpattr {
	uint32_t state, cur_state, path_mtu, qkey, rq_psn, sq_psn, dest_qp_num, access;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint16_t pkey_index;
	uint8_t en_sqd_async_notify, port_num, timeout, retry_cnt, rnr_retry, min_rnr_timer;
	uint8_t max_rd_atomic, max_dest_rd_atomic, sgid_index, hop_limit, traffic_class, sl, is_global;
	uint32_t flow_label;
	uint8_t dgid[16];
};
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"sync"
	"syscall"
	"unsafe"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
)

// cq is a CQ handed to C, with the buffer Poll fills and, for a CQ with a
// completion channel, the goroutine that forwards its events (done stops it).
// ibv_poll_cq is thread-safe (rxe's provider polls under the CQ's lock):
// pollMu keeps two threads polling the CQ from sharing wc, which gave both
// the same completions and lost others.
type cq struct {
	cq     *ib.CQ
	pollMu sync.Mutex
	wc     []ib.WC
	done   chan struct{}
	fwd    chan struct{} // closed when the forwarder has returned
}

// forward writes the C CQ pointer to the channel's pipe for every event of c,
// until done is closed.
func (c *cq) forward(wfd int, ptr uint64) {
	defer close(c.fwd)
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], ptr)
	for {
		select {
		case <-c.done:
			return
		case <-c.cq.Events():
			mu := chanLock(wfd)
			mu.Lock()
			for {
				_, err := syscall.Write(wfd, b[:])
				if err != syscall.EINTR {
					if err != nil {
						debugf("completion channel: write: %v", err)
					}
					break
				}
			}
			mu.Unlock()
		}
	}
}

// qp is a QP handed to C, with scratch space for posting. ibv_post_send and
// ibv_post_recv are thread-safe (rxe's provider posts under the queue's
// lock): sendMu guards the send scratch (send, sges, inline, inl), recvMu
// the receive scratch (recv, rsges), so that threads posting on one QP at
// once neither post each other's WRs twice nor index past them.
type qp struct {
	qp     *ib.QP
	eng    *engine
	sendMu sync.Mutex
	recvMu sync.Mutex
	send   []ib.SendWR
	recv   []ib.RecvWR
	sges   []ib.SGE
	rsges  []ib.SGE
	// inline holds the inline data of a post's WRs, copied from the
	// program's memory; the engine copies it again at PostSend (into the
	// WQE), so it is reused: no allocation per message.
	inline []byte
	inl    [][2]int // each WR's inline data in inline: start, end (-1: none)
}

// Send flags (enum ibv_send_flags).
const (
	sendFence     = 1 << 0
	sendSignaled  = 1 << 1
	sendSolicited = 1 << 2
	sendInline    = 1 << 3
)

//export srgo_reg_mr
func srgo_reg_mr(pdh C.uintptr_t, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.int, key *C.uint32_t, err *C.int) C.uintptr_t {
	pd, ok := value[*ib.PD](pdh)
	if !ok {
		*err = C.EINVAL
		return 0
	}
	mr, e := regMR("reg mr", pd, addr, length, uint64(iova), ib.Access(access))
	if e != 0 {
		*err = e
		return 0
	}
	*key = C.uint32_t(mr.LKey())
	return newHandle(mr)
}

// regMR registers [addr, addr+length) of the program's memory on pd at iova
// (ibv_reg_mr, ibv_rereg_mr's new registration), or returns the errno the
// kernel gives; op names the verb in SOFTRDMA_DEBUG's line.
func regMR(op string, pd *ib.PD, addr unsafe.Pointer, length C.size_t, iova uint64, access ib.Access) (*ib.MR, C.int) {
	buf, access, e := pinnable(op, addr, length, access)
	if e != 0 {
		return nil, e
	}
	mr, err := pd.RegMRAt(buf, iova, access)
	if err != nil {
		debugf("%s: %v", op, err)
		return nil, errno(err)
	}
	return mr, 0
}

// pinnable checks [addr, addr+length) as the kernel checks memory it is asked
// to pin for a region with access, and returns it as a slice with the access
// a device acts on, or the errno of the refusal.
func pinnable(op string, addr unsafe.Pointer, length C.size_t, access ib.Access) ([]byte, ib.Access, C.int) {
	// ib_umem_get (drivers/infiniband/core/umem.c): no pages is -EINVAL,
	// and pinning pages at address 0 fails, -EFAULT.
	if length == 0 {
		debugf("%s: length 0", op)
		return nil, 0, C.EINVAL
	}
	if addr == nil {
		debugf("%s: address NULL, length %d", op, length)
		return nil, 0, C.EFAULT
	}
	// ib_access_writable (include/rdma/ib_verbs.h): the pages are pinned
	// for writing when the region may be written, locally or remotely.
	const writable = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteAtomic | ib.AccessMWBind
	if e := checkPinnable(uint64(uintptr(addr)), uint64(length), access&writable != 0); e != nil {
		debugf("%s: %v", op, e)
		if errors.Is(e, errRangeWraps) {
			return nil, 0, C.EINVAL
		}
		return nil, 0, C.EFAULT
	}
	return unsafe.Slice((*byte)(addr), int(length)), access &^ optionalAccess, 0
}

// optionalAccess is IBV_ACCESS_OPTIONAL_RANGE, bits 20..29 (e.g.
// RELAXED_ORDERING, which perftest sets): hints a device may ignore, which
// rdma-core strips for providers that do not know them.
const optionalAccess = 0x3ff00000

//export srgo_dereg_mr
func srgo_dereg_mr(h C.uintptr_t) C.int {
	mr, ok := value[*ib.MR](h)
	if !ok {
		return C.EINVAL
	}
	if err := mr.Dereg(); err != nil {
		debugf("dereg mr: %v", err)
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

//export srgo_create_cq
func srgo_create_cq(i C.int, cqe C.int, wfd C.int, ptr C.uint64_t, depth *C.int, err *C.int) C.uintptr_t {
	d := device(i)
	if d == nil {
		*err = C.EINVAL
		return 0
	}
	e, oerr := engineOf(i, d)
	if oerr != nil {
		debugf("create cq: device %s: %v", d.Spec.Name, oerr)
		*err = C.EIO
		return 0
	}
	// The CQ holds what the kernel's driver would give it (rxe's or siw's
	// rounding), which cq->cqe reports.
	n, derr := d.CQDepth(int(cqe))
	if derr != nil {
		debugf("%v", derr)
		*err = C.EINVAL
		return 0
	}
	c, cerr := e.ctx.CreateCQ(n)
	if cerr != nil {
		debugf("create cq: %v", cerr)
		*err = errno(cerr)
		return 0
	}
	*depth = C.int(c.Depth())
	v := &cq{cq: c}
	if wfd >= 0 {
		v.done, v.fwd = make(chan struct{}), make(chan struct{})
		go v.forward(int(wfd), uint64(ptr))
	}
	return newHandle(v)
}

//export srgo_req_notify_cq
func srgo_req_notify_cq(h C.uintptr_t, solicitedOnly C.int) C.int {
	c, ok := value[*cq](h)
	if !ok {
		return C.EINVAL
	}
	c.cq.Notify(solicitedOnly != 0)
	return 0
}

//export srgo_destroy_cq
func srgo_destroy_cq(h C.uintptr_t) C.int {
	c, ok := value[*cq](h)
	if !ok {
		return C.EINVAL
	}
	if err := c.cq.Destroy(); err != nil {
		debugf("destroy cq: %v", err)
		return errno(err)
	}
	if c.done != nil {
		close(c.done)
		<-c.fwd // no event names the C CQ after it is freed
	}
	deleteHandle(h)
	return 0
}

// srgo_poll_cq polls up to n completions into out; *more says whether the
// CQ still had some after the poll (sr_poll_go then leaves the next poll in
// C only if it had none).
//
//export srgo_poll_cq
func srgo_poll_cq(h C.uintptr_t, n C.int, out *C.struct_sr_wc, more *C.int) C.int {
	c, ok := value[*cq](h)
	if !ok || n < 0 {
		return -1
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	got := c.poll(n, unsafe.Pointer(out))
	*more = 0
	if got == n && c.cq.Len() > 0 {
		*more = 1
	}
	return got
}

// poll moves up to n completions of c into out (ibv_poll_cq's Go half).
func (c *cq) poll(n C.int, out unsafe.Pointer) C.int {
	if cap(c.wc) < int(n) {
		c.wc = make([]ib.WC, n)
	}
	wc := c.wc[:n]
	got := c.cq.Poll(wc)
	o := unsafe.Slice((*C.struct_sr_wc)(out), int(n))
	for k, w := range wc[:got] {
		o[k] = C.struct_sr_wc{
			wr_id: C.uint64_t(w.WRID), status: C.uint32_t(w.Status), opcode: C.uint32_t(w.Opcode),
			byte_len: C.uint32_t(w.ByteLen), imm: C.uint32_t(w.Imm), qp_num: C.uint32_t(w.QPNum),
			src_qp: C.uint32_t(w.SrcQP), flags: C.uint32_t(w.Flags), pkey_index: C.uint32_t(w.PKeyIndex),
			invalidated_rkey: C.uint32_t(w.InvalidatedRKey),
		}
	}
	return C.int(got)
}

//export srgo_create_qp
func srgo_create_qp(pdh C.uintptr_t, typ C.int, scq, rcq, srqh C.uintptr_t, sigAll C.int, a *C.struct_sr_qpattr, qpn *C.uint32_t, err *C.int) C.uintptr_t {
	pd, ok := value[*ib.PD](pdh)
	s, ok2 := value[*cq](scq)
	r, ok3 := value[*cq](rcq)
	if !ok || !ok2 || !ok3 {
		*err = C.EINVAL
		return 0
	}
	var srq *ib.SRQ
	if srqh != 0 {
		if srq, ok = value[*ib.SRQ](srqh); !ok {
			*err = C.EINVAL
			return 0
		}
	}
	if pd.Context().Config().ExternalQPs && typ != C.int(ib.QPTypeRC) {
		// iWARP carries RC only; its QPs are connected by rdma_cm (MPA
		// over TCP): rdma_create_qp makes them here and hands them over.
		debugf("create qp: type %d on an iWARP device: iWARP has RC QPs only", typ)
		*err = C.EOPNOTSUPP
		return 0
	}
	t := ib.QPType(typ)
	if t != ib.QPTypeRC && t != ib.QPTypeUC && t != ib.QPTypeUD {
		debugf("create qp: type %d not supported", typ)
		*err = C.EOPNOTSUPP
		return 0
	}
	q, e := pd.Context().CreateQP(pd, ib.QPInitAttr{
		Type: t, SendCQ: s.cq, RecvCQ: r.cq, SRQ: srq, SignalAll: sigAll != 0,
		Cap: sendCap(ib.QPCap{
			MaxSendWR: int(a.max_send_wr), MaxRecvWR: int(a.max_recv_wr),
			MaxSendSGE: int(a.max_send_sge), MaxRecvSGE: int(a.max_recv_sge),
			MaxInlineData: int(a.max_inline),
		}, pd.Context().Config()),
	})
	if e != nil {
		debugf("create qp: %v", e)
		*err = errno(e)
		return 0
	}
	c := q.Cap()
	a.max_send_wr, a.max_recv_wr = C.uint32_t(c.MaxSendWR), C.uint32_t(c.MaxRecvWR)
	a.max_send_sge, a.max_recv_sge = C.uint32_t(c.MaxSendSGE), C.uint32_t(c.MaxRecvSGE)
	a.max_inline = C.uint32_t(c.MaxInlineData)
	*qpn = C.uint32_t(q.QPN())
	eng := engineFor(pd.Context())
	if eng != nil && eng.roce != nil {
		q.SetPosterFlushes(true) // srgo_post_send sends (sendNow)
	}
	return newHandle(&qp{qp: q, eng: eng})
}

//export srgo_destroy_qp
func srgo_destroy_qp(h C.uintptr_t) C.int {
	q, ok := value[*qp](h)
	if !ok {
		return C.EINVAL
	}
	if q.eng != nil {
		q.eng.flush()
	}
	if err := q.qp.Destroy(); err != nil {
		debugf("destroy qp: %v", err)
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

//export srgo_modify_qp
func srgo_modify_qp(h C.uintptr_t, a *C.struct_sr_qpattr, mask C.int) C.int {
	q, ok := value[*qp](h)
	if !ok {
		return C.EINVAL
	}
	m := ib.QPAttrMask(mask)
	attr := ib.QPAttr{
		QPState: ib.QPState(a.state), CurQPState: ib.QPState(a.cur_state),
		EnSQDAsyncNotify: a.en_sqd_async_notify != 0, AccessFlags: ib.Access(a.access),
		PKeyIndex: uint16(a.pkey_index), Port: uint8(a.port_num), QKey: uint32(a.qkey),
		Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry),
		RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn), DestQPN: uint32(a.dest_qp_num),
		MaxRdAtomic: int(a.max_rd_atomic), MaxDestRdAtomic: int(a.max_dest_rd_atomic),
		MinRNRTimer: uint8(a.min_rnr_timer),
	}
	if m&ib.QPAttrPathMTU != 0 {
		if a.path_mtu < 1 || a.path_mtu > 5 {
			debugf("modify qp 0x%x: path_mtu %d not an enum ibv_mtu", q.qp.QPN(), a.path_mtu)
			return C.EINVAL
		}
		attr.PathMTU = 128 << a.path_mtu
	}
	if m&ib.QPAttrAH != 0 {
		ah, ok := addressHandle(a)
		if !ok {
			debugf("modify qp 0x%x: address without a GRH (is_global 0): RoCE needs the GID", q.qp.QPN())
			return C.EINVAL
		}
		attr.AH = ah
	}
	err := q.qp.Modify(&attr, m)
	if err != nil {
		// On iWARP, what siw takes as a no-op (rping -q's modifies with
		// rdma_init_qp_attr's masks) the engine's IBTA table refuses.
		refused := err
		if err = rdmacm.ModifyAsSiw(q.qp, &attr, m, refused); err == nil {
			debugf("%v: on iWARP the QP stays in %v and only its access flags change, as siw does", refused, q.qp.State())
		}
	}
	if err != nil {
		debugf("modify qp 0x%x: %v", q.qp.QPN(), err)
		return errno(err)
	}
	return 0
}

// addressHandle converts an ibv_ah_attr (flattened into a) to the engine's
// address. RoCE has no LIDs: without a GRH there is no address (rxe refuses
// it too).
func addressHandle(a *C.struct_sr_qpattr) (ib.AddressHandle, bool) {
	if a.is_global == 0 {
		return ib.AddressHandle{}, false
	}
	// The program's hop limit is not used, as the kernel's verbs do not use
	// it on RoCE: ib_resolve_eth_dmac (ibv_modify_qp, ibv_create_ah) replaces
	// grh.hop_limit with the route's (net.ipv4.ip_default_ttl, 64), so rxe
	// sends TTL 64 when ibv_rc_pingpong asks for 1 and perftest for 255, and
	// ibv_query_qp reports 64.
	return ib.AddressHandle{
		DGID: *(*[16]byte)(unsafe.Pointer(&a.dgid[0])), SGIDIndex: uint8(a.sgid_index),
		HopLimit: roce.DefaultHopLimit, TrafficClass: uint8(a.traffic_class), FlowLabel: uint32(a.flow_label), SL: uint8(a.sl),
	}, true
}

//export srgo_create_ah
func srgo_create_ah(pdh C.uintptr_t, a *C.struct_sr_qpattr, err *C.int) C.uintptr_t {
	pd, ok := value[*ib.PD](pdh)
	if !ok {
		*err = C.EINVAL
		return 0
	}
	ah, ok := addressHandle(a)
	if !ok {
		debugf("create ah: address without a GRH (is_global 0): RoCE needs the GID")
		*err = C.EINVAL
		return 0
	}
	h := newHandle(&ah)
	ahHold(h, pd)
	return h
}

//export srgo_destroy_ah
func srgo_destroy_ah(h C.uintptr_t) C.int {
	if _, ok := value[*ib.AddressHandle](h); !ok {
		return C.EINVAL
	}
	ahRelease(h)
	deleteHandle(h)
	return 0
}

//export srgo_query_qp
func srgo_query_qp(h C.uintptr_t, a *C.struct_sr_qpattr) C.int {
	q, ok := value[*qp](h)
	if !ok {
		return C.EINVAL
	}
	at := q.qp.Query()
	a.state = C.uint32_t(q.qp.State())
	for e := 1; e <= 5; e++ {
		if 128<<e == at.PathMTU {
			a.path_mtu = C.uint32_t(e)
		}
	}
	a.qkey, a.rq_psn, a.sq_psn, a.dest_qp_num = C.uint32_t(at.QKey), C.uint32_t(at.RQPSN), C.uint32_t(at.SQPSN), C.uint32_t(at.DestQPN)
	a.access = C.uint32_t(at.AccessFlags)
	a.pkey_index, a.port_num = C.uint16_t(at.PKeyIndex), C.uint8_t(at.Port)
	a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer = C.uint8_t(at.Timeout), C.uint8_t(at.RetryCnt), C.uint8_t(at.RNRRetry), C.uint8_t(at.MinRNRTimer)
	a.max_rd_atomic, a.max_dest_rd_atomic = C.uint8_t(at.MaxRdAtomic), C.uint8_t(at.MaxDestRdAtomic)
	a.sgid_index, a.hop_limit, a.traffic_class, a.sl = C.uint8_t(at.AH.SGIDIndex), C.uint8_t(at.AH.HopLimit), C.uint8_t(at.AH.TrafficClass), C.uint8_t(at.AH.SL)
	a.flow_label = C.uint32_t(at.AH.FlowLabel)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&a.dgid[0])), 16), at.AH.DGID[:])
	c := q.qp.Cap()
	a.max_send_wr, a.max_recv_wr = C.uint32_t(c.MaxSendWR), C.uint32_t(c.MaxRecvWR)
	a.max_send_sge, a.max_recv_sge = C.uint32_t(c.MaxSendSGE), C.uint32_t(c.MaxRecvSGE)
	a.max_inline = C.uint32_t(c.MaxInlineData)
	return 0
}

// sgl converts n C SGEs, appending to buf.
func sgl(buf []ib.SGE, sg *C.struct_ibv_sge, n C.uint32_t) []ib.SGE {
	if n == 0 || sg == nil {
		return buf
	}
	for _, s := range unsafe.Slice(sg, int(n)) {
		buf = append(buf, ib.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)})
	}
	return buf
}

// postErr maps a post error to ibv_post_send's return: ENOMEM for a full
// queue, EINVAL otherwise.
func postErr(err error) C.int {
	if errors.Is(err, ib.ErrQueueFull) || errors.Is(err, ib.ErrNoResources) {
		return C.ENOMEM
	}
	return C.EINVAL
}

//export srgo_post_send
func srgo_post_send(h C.uintptr_t, w *C.struct_sr_swr, n C.int, posted *C.int) C.int {
	q, ok := value[*qp](h)
	if !ok || n <= 0 {
		return C.EINVAL
	}
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.send, q.sges = q.send[:0], q.sges[:0]
	q.inline, q.inl = q.inline[:0], q.inl[:0]
	in := unsafe.Slice(w, int(n))
	maxSGE := uint32(q.qp.Cap().MaxSendSGE)
	for k := range in {
		c := &in[k]
		if c.num_sge > C.uint32_t(maxSGE) {
			// validate_send_wr (rdma-core providers/rxe/rxe.c): more SGEs
			// than max_send_sge (a negative count, as unsigned, too) is
			// EINVAL; the list is not read.
			*posted = C.int(k)
			debugf("post send: WR %d: num_sge %d (as int) above max_send_sge %d", k, int32(c.num_sge), maxSGE)
			return C.EINVAL
		}
		start := len(q.sges)
		q.sges = sgl(q.sges, c.sg, c.num_sge)
		wr := ib.SendWR{
			WRID: uint64(c.wr_id), Opcode: ib.WROpcode(c.opcode),
			Signaled: c.flags&sendSignaled != 0, Fence: c.flags&sendFence != 0, Solicited: c.flags&sendSolicited != 0,
			Imm: uint32(c.imm), InvalidateRKey: uint32(c.invalidate_rkey),
			RemoteAddr: uint64(c.remote_addr), RKey: uint32(c.rkey),
			CompareAdd: uint64(c.compare_add), Swap: uint64(c.swap),
			RemoteQPN: uint32(c.remote_qpn), RemoteQKey: uint32(c.remote_qkey),
		}
		atomic := wr.Opcode == ib.WRAtomicCmpAndSwp || wr.Opcode == ib.WRAtomicFetchAdd
		if atomic && q.eng != nil && q.eng.iw != nil {
			// siw has no atomics (siw_query_device: atomic_cap 0), and
			// libsiw refuses the opcode at post (rdma-core providers/siw
			// push_send_wqe: "libsiw: opcode N unsupported"), returning
			// -EINVAL, negative: ibv_post_send returns the same here.
			*posted = C.int(k)
			debugf("post send: WR %d: opcode %d unsupported on iWARP (siw has no atomics): -EINVAL, as libsiw", k, c.opcode)
			return -C.EINVAL
		}
		if atomic && wr.RemoteAddr&7 != 0 {
			// validate_send_wr (rdma-core providers/rxe/rxe.c): an atomic
			// at an address not 8-aligned is EINVAL at post.
			*posted = C.int(k)
			debugf("post send: WR %d: atomic remote_addr 0x%x not 8-byte aligned", k, wr.RemoteAddr)
			return C.EINVAL
		}
		if wr.Opcode == ib.WRBindMW {
			b, why := bindInfo(c)
			if why != "" {
				*posted = C.int(k)
				debugf("post send: WR %d: BIND_MW %s", k, why)
				return C.EINVAL
			}
			wr.Bind = b
		}
		if c.ah != 0 {
			ah, ok := value[*ib.AddressHandle](c.ah)
			if !ok {
				*posted = C.int(k)
				debugf("post send: WR %d: not an address handle", k)
				return C.EINVAL
			}
			wr.AH = ah
		}
		span := [2]int{-1, -1}
		if c.flags&sendInline != 0 {
			// The SGEs name unregistered memory the program may reuse at once:
			// copy the bytes now. Their addresses are the program's (C memory).
			span[0] = len(q.inline)
			for _, s := range q.sges[start:] {
				if s.Length > 0 {
					q.inline = append(q.inline, unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(s.Addr))), int(s.Length))...)
				}
			}
			span[1] = len(q.inline)
			wr.Inline = true
			q.sges = q.sges[:start]
		}
		q.send = append(q.send, wr)
		q.inl = append(q.inl, span)
	}
	// The SGL and inline slices are cut once q.sges and q.inline stop
	// growing. Inline data is never nil: nil would mean "the SGL's bytes".
	if q.inline == nil {
		q.inline = make([]byte, 0, 256)
	}
	off := 0
	for k := range q.send {
		if q.send[k].Inline {
			st, end := q.inl[k][0], q.inl[k][1]
			q.send[k].InlineData = q.inline[st:end:end]
			continue
		}
		m := int(in[k].num_sge)
		if in[k].sg == nil {
			m = 0
		}
		q.send[k].SGL = q.sges[off : off+m : off+m]
		off += m
	}
	if err := q.qp.PostSend(q.send...); err != nil {
		var pe *ib.PostError
		if errors.As(err, &pe) {
			*posted = C.int(pe.Index)
		}
		debugf("post send: %v", err)
		return postErr(err)
	}
	*posted = n
	clear(q.send) // keep no reference to the program's memory or q.inline
	q.eng.sendNow()
	return 0
}

// recvWRs converts n flat receive WRs into wrs and sges (reused), up to the
// first whose SGE count is above maxSGE (a negative count, as unsigned, too):
// rxe_post_one_recv (rdma-core providers/rxe/rxe.c) refuses it, EINVAL,
// before it reads its list, and so does the caller. tooMany is its index, or
// -1.
func recvWRs(wrs []ib.RecvWR, sges []ib.SGE, w *C.struct_sr_rwr, n C.int, maxSGE int) (_ []ib.RecvWR, _ []ib.SGE, tooMany int) {
	wrs, sges = wrs[:0], sges[:0]
	in := unsafe.Slice(w, int(n))
	tooMany = -1
	for k := range in {
		if in[k].num_sge > C.uint32_t(maxSGE) {
			debugf("post recv: WR %d: num_sge %d (as int) above the queue's %d", k, int32(in[k].num_sge), maxSGE)
			in, tooMany = in[:k], k
			break
		}
		sges = sgl(sges, in[k].sg, in[k].num_sge)
		wrs = append(wrs, ib.RecvWR{WRID: uint64(in[k].wr_id)})
	}
	off := 0
	for k := range wrs {
		m := int(in[k].num_sge)
		if in[k].sg == nil {
			m = 0
		}
		wrs[k].SGL = sges[off : off+m : off+m]
		off += m
	}
	return wrs, sges, tooMany
}

// postRecvs posts wrs with post, then refuses the WR at tooMany (if any)
// with EINVAL, as ibv_post_recv's *bad_wr.
func postRecvs(post func(...ib.RecvWR) error, wrs []ib.RecvWR, tooMany int, what string, posted *C.int) C.int {
	if err := post(wrs...); err != nil {
		var pe *ib.PostError
		if errors.As(err, &pe) {
			*posted = C.int(pe.Index)
		}
		debugf("%s: %v", what, err)
		return postErr(err)
	}
	if tooMany >= 0 {
		*posted = C.int(tooMany)
		return C.EINVAL
	}
	*posted = C.int(len(wrs))
	return 0
}

//export srgo_create_srq
func srgo_create_srq(pdh C.uintptr_t, maxWR, maxSGE, limit C.uint32_t, err *C.int) C.uintptr_t {
	pd, ok := value[*ib.PD](pdh)
	if !ok {
		*err = C.EINVAL
		return 0
	}
	s, e := pd.Context().CreateSRQ(pd, ib.SRQInitAttr{MaxWR: int(maxWR), MaxSGE: int(maxSGE), Limit: int(limit)})
	if e != nil {
		debugf("create srq: %v", e)
		*err = errno(e)
		return 0
	}
	return newHandle(s)
}

//export srgo_arm_srq
func srgo_arm_srq(h C.uintptr_t, limit C.uint32_t) C.int {
	s, ok := value[*ib.SRQ](h)
	if !ok {
		return C.EINVAL
	}
	if err := s.ArmLimit(int(limit)); err != nil {
		debugf("modify srq: %v", err)
		return errno(err)
	}
	return 0
}

//export srgo_destroy_srq
func srgo_destroy_srq(h C.uintptr_t) C.int {
	s, ok := value[*ib.SRQ](h)
	if !ok {
		return C.EINVAL
	}
	if err := s.Destroy(); err != nil {
		debugf("destroy srq: %v", err)
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

// srqScratch is the conversion space of srgo_post_srq_recv. The SRQ's own
// lock does not cover it: posting to one SRQ from two threads at once is
// rare, and a mutex keeps them apart.
var srqScratch struct {
	sync.Mutex
	wrs  []ib.RecvWR
	sges []ib.SGE
}

//export srgo_post_srq_recv
func srgo_post_srq_recv(h C.uintptr_t, w *C.struct_sr_rwr, n C.int, posted *C.int) C.int {
	s, ok := value[*ib.SRQ](h)
	if !ok || n <= 0 {
		return C.EINVAL
	}
	srqScratch.Lock()
	defer srqScratch.Unlock()
	var tooMany int
	srqScratch.wrs, srqScratch.sges, tooMany = recvWRs(srqScratch.wrs, srqScratch.sges, w, n, s.MaxSGE())
	return postRecvs(s.PostRecv, srqScratch.wrs, tooMany, "post srq recv", posted)
}

//export srgo_post_recv
func srgo_post_recv(h C.uintptr_t, w *C.struct_sr_rwr, n C.int, posted *C.int) C.int {
	q, ok := value[*qp](h)
	if !ok || n <= 0 {
		return C.EINVAL
	}
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	var tooMany int
	q.recv, q.rsges, tooMany = recvWRs(q.recv, q.rsges, w, n, q.qp.Cap().MaxRecvSGE)
	return postRecvs(q.qp.PostRecv, q.recv, tooMany, "post recv", posted)
}

// mwLocalAccess are the bits of a bind's mw_access_flags that name no remote
// right: rxe keeps them in the window (rxe_bind_mw accepts any of the
// region's access bits) where they mean nothing, and pyverbs' MW tests ask
// for IBV_ACCESS_LOCAL_WRITE; the engine takes remote rights only.
const mwLocalAccess = ib.AccessLocalWrite | ib.AccessMWBind

// bindInfo converts the BIND_MW fields of a flat send WR, or says why
// ibv_post_send refuses it with EINVAL: validate_send_wr (rdma-core
// providers/rxe/rxe.c) refuses a bind with SGEs or immediate data, and the
// window must be one. The new R_Key keeps the window's index and takes the
// low byte the program chose, as rxe_do_bind_mw does.
func bindInfo(c *C.struct_sr_swr) (ib.MWBindInfo, string) {
	if c.num_sge != 0 || c.imm != 0 {
		return ib.MWBindInfo{}, "with SGEs or immediate data"
	}
	mw, ok := value[*ib.MW](c.mw)
	if !ok {
		return ib.MWBindInfo{}, "without a memory window"
	}
	b := ib.MWBindInfo{
		MW: mw, RKey: mw.RKey()&^0xff | uint32(c.rkey)&0xff,
		Addr: uint64(c.remote_addr), Length: uint64(c.mw_length), Access: ib.Access(c.mw_access) &^ mwLocalAccess,
	}
	if c.mr != 0 {
		mr, ok := value[*ib.MR](c.mr)
		if !ok {
			return ib.MWBindInfo{}, "with a region that is not one"
		}
		b.MR = mr
	}
	return b, ""
}
