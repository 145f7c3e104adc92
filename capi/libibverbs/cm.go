package main

// The rdma_cm engine behind librdmacm.so.1 (capi/librdmacm): package rdmacm's
// Manager over the devices of SOFTRDMA_DEVICES, reached through the srcm_*
// functions of srcm.h. It lives here, in libibverbs.so.1, because a process
// holds one Go runtime: librdmacm.so.1 is C that links against this library
// and calls these entry points (exported in the private version node
// SOFTRDMA_CM_PRIVATE), so that an ID's device is the very engine the
// program's ibv_context, PD, CQs and QP use.
//
// Events: each ID has a goroutine forwarding its rdmacm events to the queue
// of the ID's event channel, and the channel's eventfd (semaphore mode) counts
// the events queued, exactly: poll and epoll on it say whether one is there.
// librdmacm's rdma_get_cm_event takes one with srcm_next_event, or waits on
// the fd (unless the program made it non-blocking).

/*
#define SRCM_NO_PROTOS
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include "srcm.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/ibcm"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// cm is the process's connection manager: made at the first rdma_cm call,
// over every device that opens.
var cm struct {
	once sync.Once
	m    *rdmacm.Manager
	idx  map[*ib.Context]int // device index of each engine's context

	// mu guards the channels' queues and the IDs' channels and C pointers.
	mu sync.Mutex
}

func cmManager() *rdmacm.Manager {
	cm.once.Do(func() {
		cmExitArm() // cm_exit.go
		m := rdmacm.NewManager(rdmacm.Config{})
		cm.idx = map[*ib.Context]int{}
		for i, d := range loadDevices() {
			e, err := engineOf(C.int(i), d)
			if err != nil {
				debugf("rdma_cm: device %s: %v", d.Spec.Name, err)
				continue
			}
			switch {
			case e.roce != nil:
				agent, err := ibcm.NewAgent(ibcm.AgentConfig{Device: e.roce})
				if err != nil {
					debugf("rdma_cm: device %s: CM agent: %v", d.Spec.Name, err)
					continue
				}
				go agent.Run(context.Background())
				err = m.AddRoCE(agent)
				if err != nil {
					debugf("rdma_cm: device %s: %v", d.Spec.Name, err)
					continue
				}
			case e.iw != nil:
				if err := m.AddIWARP(e.iw, rdmacm.IWARPConfig{Addrs: []netip.Addr{d.Spec.Addr}, Params: e.iwParams}); err != nil {
					debugf("rdma_cm: device %s: %v", d.Spec.Name, err)
					continue
				}
			default:
				continue
			}
			cm.idx[e.ctx] = i
		}
		cm.m = m
	})
	return cm.m
}

// cmChannel is an rdma_event_channel: the events not yet taken, counted by
// the eventfd efd. Under cm.mu the eventfd's count is len(q), whatever
// leaves the queue (taken, dropped with its ID, moved to another channel):
// poll and epoll on the fd say readable exactly when an event is there.
type cmChannel struct {
	efd    int
	q      []cmQueued // guarded by cm.mu
	closed bool
}

// push queues e and adds one to the eventfd. Called with cm.mu held.
func (ch *cmChannel) push(e cmQueued) {
	ch.q = append(ch.q, e)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	syscall.Write(ch.efd, one[:])
}

// remove takes the queued events drop chooses out of the queue, in order,
// and their counts off the eventfd (semaphore mode: one read each; none
// blocks, the count being len(q)). Called with cm.mu held.
func (ch *cmChannel) remove(drop func(cmQueued) bool) []cmQueued {
	var gone []cmQueued
	q := ch.q[:0]
	for _, e := range ch.q {
		if drop(e) {
			gone = append(gone, e)
			continue
		}
		q = append(q, e)
	}
	clear(ch.q[len(q):])
	ch.q = q
	ch.uncount(len(gone))
	return gone
}

// uncount reads n counts off the eventfd. Called with cm.mu held.
func (ch *cmChannel) uncount(n int) {
	var v [8]byte
	for range n {
		if _, err := syscall.Read(ch.efd, v[:]); err != nil {
			debugf("rdma_cm: event channel fd %d: read: %v", ch.efd, err)
			return
		}
	}
}

type cmQueued struct {
	w  *cmID
	ev rdmacm.Event
}

// cmID is an rdma_cm_id: the engine's ID, the channel its events go to and
// the C struct that names it to the program.
type cmID struct {
	id   *rdmacm.ID
	ch   *cmChannel // guarded by cm.mu
	cptr uint64     // the C struct rdma_cm_id; guarded by cm.mu
	dead bool       // destroyed; guarded by cm.mu

	// reported counts the events of the ID the program has taken (a
	// connection request counts against its listener), as the kernel's
	// ucma does: rdma_destroy_id and rdma_migrate_id wait until librdmacm
	// has seen as many acknowledged. Guarded by cm.mu, so that an event
	// taken is counted before a destroy or migration can read the count.
	reported int
}

// forward moves w's events to its channel until the ID is destroyed. A
// connection request makes the new connection's cmID, on the listener's
// channel, and starts its forwarder.
func (w *cmID) forward() {
	for ev := range w.id.Events() {
		cm.mu.Lock()
		ch := w.ch
		if w.dead || ch == nil || ch.closed {
			cm.mu.Unlock()
			if ev.Type == rdmacm.EventConnectRequest {
				ev.ID.Reject(nil)
				ev.ID.Destroy()
			}
			continue
		}
		if ev.Type == rdmacm.EventConnectRequest {
			// The event is queued as the new connection's (its C struct is
			// made when the program takes it); ev.Listener names w.
			nw := &cmID{id: ev.ID, ch: ch}
			go nw.forward()
			ev.Listener = w.id
			ch.push(cmQueued{w: nw, ev: ev})
		} else {
			ch.push(cmQueued{w: w, ev: ev})
		}
		cm.mu.Unlock()
	}
}

// idsByEngine finds the cmID of an engine ID: the listener of a queued
// connection request (alive while its request is queued: destroying it
// purges them).
var idsByEngine = map[*rdmacm.ID]*cmID{} // guarded by cm.mu

func cmErrno(err error) C.int {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &en):
		return C.int(en)
	case errors.Is(err, rdmacm.ErrInvalidState), errors.Is(err, rdmacm.ErrInvalid), errors.Is(err, rdmacm.ErrDestroyed):
		return C.EINVAL
	case errors.Is(err, rdmacm.ErrNoDevice):
		return C.ENODEV
	case errors.Is(err, rdmacm.ErrAddrInUse):
		return C.EADDRINUSE
	case errors.Is(err, rdmacm.ErrNotSupported):
		return C.EOPNOTSUPP
	case errors.Is(err, rdmacm.ErrConnected):
		return C.EISCONN
	}
	return errno(err)
}

//export srcm_create_channel
func srcm_create_channel(efd C.int) C.uintptr_t {
	return newHandle(&cmChannel{efd: int(efd)})
}

//export srcm_destroy_channel
func srcm_destroy_channel(h C.uintptr_t) C.int {
	ch, ok := takeHandle[*cmChannel](h)
	if !ok {
		return C.EINVAL
	}
	cm.mu.Lock()
	ch.closed = true
	ch.q = nil
	cm.mu.Unlock()
	return 0
}

// sockaddr reads a C struct sockaddr (AF_INET or AF_INET6).
func sockaddr(sa *C.struct_sockaddr) (netip.AddrPort, bool) {
	if sa == nil {
		return netip.AddrPort{}, false
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(sa)), 28)
	port := binary.BigEndian.Uint16(b[2:4])
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case syscall.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), true
	case syscall.AF_INET6:
		a := netip.AddrFrom16([16]byte(b[8:24]))
		return netip.AddrPortFrom(a.Unmap(), port), true
	}
	return netip.AddrPort{}, false
}

// putSockaddr writes ap to a struct sockaddr_storage; an invalid ap leaves it zero.
func putSockaddr(ss *C.struct_sockaddr_storage, ap netip.AddrPort) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(ss)), unsafe.Sizeof(*ss))
	clear(b)
	a := ap.Addr()
	if !a.IsValid() {
		return
	}
	binary.BigEndian.PutUint16(b[2:4], ap.Port())
	if a.Is4() {
		binary.NativeEndian.PutUint16(b[0:2], syscall.AF_INET)
		a4 := a.As4()
		copy(b[4:8], a4[:])
		return
	}
	binary.NativeEndian.PutUint16(b[0:2], syscall.AF_INET6)
	a16 := a.As16()
	copy(b[8:24], a16[:])
}

//export srcm_create_id
func srcm_create_id(chh C.uintptr_t, cptr C.uint64_t, ps C.int, err *C.int) C.uintptr_t {
	var ch *cmChannel
	if chh != 0 {
		var ok bool
		if ch, ok = value[*cmChannel](chh); !ok {
			*err = C.EINVAL
			return 0
		}
	}
	id, e := cmManager().CreateID(rdmacm.PortSpace(ps))
	if e != nil {
		debugf("rdma_create_id: %v", e)
		*err = cmErrno(e)
		return 0
	}
	w := &cmID{id: id, ch: ch, cptr: uint64(cptr)}
	cm.mu.Lock()
	idsByEngine[id] = w
	cm.mu.Unlock()
	go w.forward()
	return newHandle(w)
}

//export srcm_destroy_id
func srcm_destroy_id(h C.uintptr_t, reported *C.int) C.int {
	// The handle goes first: a call on the ID from another thread (the
	// program's CM thread refreshing the ID of an event it took) fails with
	// EINVAL from here on, and a second destroy finds nothing to destroy.
	w, ok := takeHandle[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	var orphans []*rdmacm.ID
	cm.mu.Lock()
	w.dead = true
	*reported = C.int(w.reported)
	delete(idsByEngine, w.id)
	if ch := w.ch; ch != nil {
		// Events not taken yet that name w go: the C struct they would
		// name is freed. A request to w (a listener) is rejected, and the
		// events its connection queued behind it go with it.
		ch.remove(func(e cmQueued) bool {
			if e.ev.Type == rdmacm.EventConnectRequest && e.ev.Listener == w.id {
				e.w.dead = true
				orphans = append(orphans, e.w.id)
			}
			return e.w == w || e.w.dead
		})
	}
	cm.mu.Unlock()
	for _, id := range orphans {
		id.Reject(nil)
		id.Destroy()
	}
	err := w.id.Destroy()
	if err != nil {
		debugf("rdma_destroy_id: %v", err)
	}
	return 0
}

//export srcm_migrate_id
func srcm_migrate_id(h, chh C.uintptr_t, reported *C.int) C.int {
	w, ok := value[*cmID](h)
	ch, ok2 := value[*cmChannel](chh)
	if !ok || !ok2 {
		return C.EINVAL
	}
	cm.mu.Lock()
	defer cm.mu.Unlock()
	*reported = C.int(w.reported)
	old := w.ch
	w.ch = ch
	if old == nil || old == ch {
		return 0
	}
	// Events already queued for w move with it, in order, with their
	// counts, as the kernel's ucma_migrate_id moves them: w's own and, for
	// a listener, its connection requests. A request's connection goes to
	// the new channel too (librdmacm gives it the channel the request is
	// taken from), with the events it queued behind its request.
	conns := map[*cmID]bool{}
	moved := old.remove(func(e cmQueued) bool {
		if e.ev.Type == rdmacm.EventConnectRequest && e.ev.Listener == w.id {
			conns[e.w] = true
			return true
		}
		return e.w == w || conns[e.w]
	})
	for nw := range conns {
		nw.ch = ch
	}
	for _, e := range moved {
		ch.push(e)
	}
	return 0
}

//export srcm_next_event
func srcm_next_event(chh C.uintptr_t, out *C.struct_srcm_event, size, hoff C.size_t) C.int {
	ch, ok := value[*cmChannel](chh)
	if !ok {
		return C.EINVAL
	}
	// Each event the program takes is said under SOFTRDMA_DEBUG, with the
	// ID's addresses, once cm.mu is released (the addresses take the
	// engine's lock): a log that shows which connection a program took.
	var taken *cmQueued
	defer func() {
		if taken != nil && debugOn() {
			id := taken.w.id
			debugf("rdma_cm: %v, local %v remote %v%s", taken.ev.Type, id.LocalAddr(), id.RemoteAddr(), errSuffix(taken.ev.Err))
		}
	}()
	cm.mu.Lock()
	defer cm.mu.Unlock()
	var e cmQueued
	for {
		if len(ch.q) == 0 {
			return C.EAGAIN
		}
		e = ch.q[0]
		ch.q[0] = cmQueued{}
		ch.q = ch.q[1:]
		ch.uncount(1)
		if !e.w.dead {
			break
		}
		// A connection whose request was dropped (its listener destroyed,
		// or no memory for its struct): no C struct names it.
	}
	*out = C.struct_srcm_event{}
	ev := e.ev
	owner := e.w // whose count the event is
	out._type, out.status = C.int32_t(ev.Type), C.int32_t(ev.Status)
	if ev.Type == rdmacm.EventConnectRequest {
		// The new connection's C struct is made here, under cm.mu, so that
		// none of its own events can be taken before it has one.
		p := C.calloc(1, size)
		if p == nil {
			e.w.dead = true
			go func() { e.w.id.Reject(nil); e.w.id.Destroy() }()
			return C.ENOMEM
		}
		e.w.cptr = uint64(uintptr(p))
		out.newh = newHandle(e.w)
		// Its handle too: another thread taking one of the connection's
		// own events from this channel (after cm.mu) finds it set, not 0.
		*(*C.uintptr_t)(unsafe.Add(p, hoff)) = out.newh
		idsByEngine[e.w.id] = e.w
		if l := idsByEngine[ev.Listener]; l != nil {
			out.listen = C.uint64_t(l.cptr)
			owner = l
		}
	}
	owner.reported++
	out.id = C.uint64_t(e.w.cptr)
	pd := ev.Param.PrivateData
	if e.w.id.PortSpace() == rdmacm.PortSpaceUDP {
		out.ud = 1
		pd = ev.UD.PrivateData
		ah := ev.UD.AH
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out.ah_dgid[0])), 16), ah.DGID[:])
		out.ah_sgid_index, out.ah_hop_limit = C.uint8_t(ah.SGIDIndex), C.uint8_t(ah.HopLimit)
		out.ah_traffic_class, out.ah_sl = C.uint8_t(ah.TrafficClass), C.uint8_t(ah.SL)
		out.ah_flow_label = C.uint32_t(ah.FlowLabel)
		out.ud_qp_num, out.ud_qkey = C.uint32_t(ev.UD.QPNum), C.uint32_t(ev.UD.QKey)
	}
	putParam(&out.param, ev.Param, pd)
	taken = &e
	return 0
}

// errSuffix is ": err", or nothing for nil.
func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

func putParam(o *C.struct_srcm_param, p rdmacm.ConnParam, pd []byte) {
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&o.private_data[0])), len(o.private_data)), pd)
	o.private_data_len = C.uint32_t(n)
	o.responder_resources, o.initiator_depth = C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth)
	o.retry_count, o.rnr_retry_count = C.uint8_t(p.RetryCount), C.uint8_t(p.RNRRetryCount)
	if p.FlowControl {
		o.flow_control = 1
	}
	if p.SRQ {
		o.srq = 1
	}
	o.qp_num = C.uint32_t(p.QPNum)
}

func getParam(p *C.struct_srcm_param) rdmacm.ConnParam {
	if p == nil {
		return rdmacm.ConnParam{}
	}
	n := min(int(p.private_data_len), len(p.private_data))
	return rdmacm.ConnParam{
		PrivateData:        append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&p.private_data[0])), n)...),
		ResponderResources: uint8(p.responder_resources), InitiatorDepth: uint8(p.initiator_depth),
		FlowControl: p.flow_control != 0, RetryCount: uint8(p.retry_count), RNRRetryCount: uint8(p.rnr_retry_count),
		SRQ: p.srq != 0, QPNum: uint32(p.qp_num),
	}
}

//export srcm_info
func srcm_info(h C.uintptr_t, out *C.struct_srcm_info) C.int {
	w, ok := value[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	out.dev = -1
	if c := w.id.Context(); c != nil {
		if i, ok := cm.idx[c]; ok {
			out.dev = C.int32_t(i)
		}
	}
	out.has_qp = 0
	if w.id.QP() != nil {
		out.has_qp = 1
	}
	l, r := w.id.LocalAddr(), w.id.RemoteAddr()
	putSockaddr(&out.src, l)
	putSockaddr(&out.dst, r)
	sg, dg := l.Addr().As16(), r.Addr().As16()
	if !l.Addr().IsValid() {
		sg = [16]byte{}
	}
	if !r.Addr().IsValid() {
		dg = [16]byte{}
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out.sgid[0])), 16), sg[:])
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out.dgid[0])), 16), dg[:])
	return 0
}

func cmIDOf(h C.uintptr_t) (*rdmacm.ID, bool) {
	w, ok := value[*cmID](h)
	if !ok {
		return nil, false
	}
	return w.id, true
}

//export srcm_bind_addr
func srcm_bind_addr(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	id, ok := cmIDOf(h)
	ap, ok2 := sockaddr(sa)
	if !ok || !ok2 {
		return C.EINVAL
	}
	if err := id.BindAddr(ap); err != nil {
		debugf("rdma_bind_addr %v: %v", ap, err)
		return cmErrno(err)
	}
	return 0
}

//export srcm_resolve_addr
func srcm_resolve_addr(h C.uintptr_t, src, dst *C.struct_sockaddr, ms C.int) C.int {
	id, ok := cmIDOf(h)
	d, ok2 := sockaddr(dst)
	if !ok || !ok2 {
		return C.EINVAL
	}
	s, _ := sockaddr(src)
	if err := id.ResolveAddr(s.Addr(), d, time.Duration(ms)*time.Millisecond); err != nil {
		debugf("rdma_resolve_addr %v: %v", d, err)
		return cmErrno(err)
	}
	return 0
}

//export srcm_resolve_route
func srcm_resolve_route(h C.uintptr_t, ms C.int) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	if err := id.ResolveRoute(time.Duration(ms) * time.Millisecond); err != nil {
		debugf("rdma_resolve_route: %v", err)
		return cmErrno(err)
	}
	return 0
}

//export srcm_attach_qp
func srcm_attach_qp(h, qph C.uintptr_t) C.int {
	id, ok := cmIDOf(h)
	q, ok2 := value[*qp](qph)
	if !ok || !ok2 {
		return C.EINVAL
	}
	if err := id.AttachQP(q.qp); err != nil {
		debugf("rdma_create_qp: %v", err)
		return cmErrno(err)
	}
	return 0
}

//export srcm_release_qp
func srcm_release_qp(h C.uintptr_t) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	id.ReleaseQP()
	return 0
}

//export srcm_connect
func srcm_connect(h C.uintptr_t, p *C.struct_srcm_param) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	if err := id.Connect(getParam(p)); err != nil {
		debugf("rdma_connect: %v", err)
		return cmErrno(err)
	}
	return 0
}

//export srcm_listen
func srcm_listen(h C.uintptr_t, backlog C.int) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	if err := id.Listen(int(backlog)); err != nil {
		debugf("rdma_listen: %v", err)
		return cmErrno(err)
	}
	// Said once the ID listens (a connection request now reaches it): a
	// program's own output has no such moment over RoCE, which has no socket
	// of its own, and the tests start a client only after it.
	debugf("rdma_listen: listening on %v", id.LocalAddr())
	return 0
}

//export srcm_accept
func srcm_accept(h C.uintptr_t, p *C.struct_srcm_param) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	if err := id.Accept(getParam(p)); err != nil {
		debugf("rdma_accept: %v", err)
		return cmErrno(err)
	}
	return 0
}

// srcm_reject is rdma_reject, and rdma_reject_ece with reason 35 (the REJ's
// reason; 0 for rdma_reject's).
//
//export srcm_reject
func srcm_reject(h C.uintptr_t, pd unsafe.Pointer, n C.int, reason C.int) C.int {
	id, ok := cmIDOf(h)
	if !ok || n < 0 || (pd == nil && n > 0) {
		return C.EINVAL
	}
	var b []byte
	if n > 0 {
		b = append(b, unsafe.Slice((*byte)(pd), int(n))...)
	}
	r := ibcm.RejConsumer
	if reason != 0 {
		r = ibcm.RejectReason(reason)
	}
	if err := id.RejectReason(b, r); err != nil {
		debugf("rdma_reject: %v", err)
		return cmErrno(err)
	}
	return 0
}

//export srcm_disconnect
func srcm_disconnect(h C.uintptr_t) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	if err := id.Disconnect(); err != nil {
		debugf("rdma_disconnect: %v", err)
		return cmErrno(err)
	}
	return 0
}

//export srcm_set_tos
func srcm_set_tos(h C.uintptr_t, tos C.int) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	id.SetTOS(uint8(tos))
	return 0
}

// srcm_notify is rdma_notify: event is an enum ibv_event_type.
//
//export srcm_notify
func srcm_notify(h C.uintptr_t, event C.int) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	if err := id.Notify(rdmacm.NotifyEvent(event)); err != nil {
		debugf("rdma_notify: %v", err)
		return cmErrno(err)
	}
	return 0
}
