package main

// Asynchronous events: the Go side. Each engine's events (ibtransport's
// Context.AsyncEvents: QP, CQ and SRQ errors, SRQ limit, last WQE reached,
// communication established, SQ drained) go to the C queue of the context that
// created the object they name (async_c.go), while the object is watched:
// from its create verb until its destroy verb.

/*
#include <stdint.h>
extern void sr_async_watch(void *obj, int kind);
extern void sr_async_forget(void *obj, int kind);
extern void sr_async_push(void *obj, int kind, int type);
*/
import "C"

import (
	"sync"
	"unsafe"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// Kinds of watched objects (SR_OBJ_* in async_c.go).
const (
	objQP  = 1
	objCQ  = 2
	objSRQ = 3
)

// watched is the C object an engine object was handed out as.
type watched struct {
	ptr  unsafe.Pointer
	kind C.int
}

// asyncWatch maps engine objects to their C objects and back. Its lock is held
// while an event is pushed, so that once srgo_async_forget has returned no
// event names the object.
var asyncWatch struct {
	sync.Mutex
	objs map[any]watched
	back map[unsafe.Pointer]any
}

// It returns 0 (SRGO wants a value).
//
//export srgo_async_watch
func srgo_async_watch(h C.uintptr_t, kind C.int, obj unsafe.Pointer) C.int {
	var key any
	switch kind {
	case objQP:
		if q, ok := value[*qp](h); ok {
			key = q.qp
		}
	case objCQ:
		if c, ok := value[*cq](h); ok {
			key = c.cq
		}
	case objSRQ:
		if s, ok := value[*ib.SRQ](h); ok {
			key = s
		}
	}
	if key == nil {
		return 0
	}
	C.sr_async_watch(obj, kind)
	asyncWatch.Lock()
	defer asyncWatch.Unlock()
	if asyncWatch.objs == nil {
		asyncWatch.objs, asyncWatch.back = map[any]watched{}, map[unsafe.Pointer]any{}
	}
	asyncWatch.objs[key] = watched{obj, kind}
	asyncWatch.back[obj] = key
	return 0
}

//export srgo_async_forget
func srgo_async_forget(obj unsafe.Pointer, kind C.int) C.int {
	asyncWatch.Lock()
	if key, ok := asyncWatch.back[obj]; ok {
		delete(asyncWatch.objs, key)
		delete(asyncWatch.back, obj)
	}
	asyncWatch.Unlock()
	// Drops its unread events, waits for the program's acknowledgements.
	C.sr_async_forget(obj, kind)
	return 0
}

// forwardAsync hands e's events to the C queues, for the life of the process.
func (e *engine) forwardAsync() {
	for ev := range e.ctx.AsyncEvents() {
		var key any
		switch {
		case ev.QP != nil:
			key = ev.QP
		case ev.SRQ != nil:
			key = ev.SRQ
		case ev.CQ != nil:
			key = ev.CQ
		default:
			continue
		}
		asyncWatch.Lock()
		if w, ok := asyncWatch.objs[key]; ok {
			C.sr_async_push(w.ptr, w.kind, C.int(ev.Type))
		} else {
			debugf("async event %v: its object is gone", ev.Type)
		}
		asyncWatch.Unlock()
	}
}
