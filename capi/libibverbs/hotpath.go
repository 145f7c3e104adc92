package main

// The verbs' hot path: a C program's busy-poll loop that sleeps when there
// is nothing to poll (sr_poll_idle in verbs_c.go, woken from here), and posts
// that send from the posting thread.

// #include <stdint.h>
// #include <stdlib.h>
import "C"

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// wakeWord is what sr_poll_idle sleeps on, in C memory: a futex word that the
// engine bumps at every completion, and the number of threads asleep on it.
// The program's thread waits in C, outside Go: a thread that slept in Go
// (on a channel) was a locked thread that the runtime woke by handing it a
// processor, and once it was back in C no thread was left waiting on the
// network (the runtime's poller), so the next packet waited for the
// runtime's monitor: ib_send_lat's round trip was 90-120 µs, 8 context
// switches, where softrdma perf's is 20-25 µs.
type wakeWord struct {
	seq     uint32
	waiters uint32
	// The shared reads (sharedreads.go): a thread waiting in poll(2) on the
	// device's socket (cwaiting), whether the reads are lent to the
	// program's threads (lent), the socket and the eventfd that completions
	// signal (sock, cefd; -1 without), and the last idle poll (lastPoll,
	// CLOCK_MONOTONIC ns). C's struct sr_wake (verbs_c.go) has this layout.
	cwaiting uint32
	lent     uint32
	sock     int32
	cefd     int32
	lastPoll int64
	// owed: srgo_rx left what the datagrams it handed over call for (their
	// ACKs) to the program's next flush: its post's, or its next wait's.
	owed uint32
	_    uint32
}

// wakeWords holds the word of each engine (by its *ib.Context), made at the
// first poll that wants it.
var wakeWords sync.Map

const (
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// wakeOf returns ctx's word, making it (and hooking it to the engine's
// completions) the first time.
func wakeOf(ctx *ib.Context) *wakeWord {
	if w, ok := wakeWords.Load(ctx); ok {
		return w.(*wakeWord)
	}
	w := (*wakeWord)(C.calloc(1, C.size_t(unsafe.Sizeof(wakeWord{}))))
	if v, loaded := wakeWords.LoadOrStore(ctx, w); loaded {
		C.free(unsafe.Pointer(w))
		return v.(*wakeWord)
	}
	w.sock, w.cefd = -1, -1
	ctx.OnCompletion(w.completed)
	return w
}

// completed counts a completion and wakes the sleepers (under the engine's
// lock). The order, seq first and then waiters, pairs with sr_poll_idle's
// (waiters first, then the futex's check of seq): a sleeper either sees the
// new seq or is seen and woken.
func (w *wakeWord) completed() {
	atomic.AddUint32(&w.seq, 1)
	if atomic.LoadUint32(&w.waiters) != 0 {
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&w.seq)), futexWakePrivate, 1<<31-1, 0, 0, 0)
	}
	if atomic.LoadUint32(&w.cwaiting) != 0 {
		w.signalPoller()
	}
}

// srgo_cq_wake returns the futex word of the engine behind the CQ h, which
// sr_poll_idle keeps in the context.
//
//export srgo_cq_wake
func srgo_cq_wake(h C.uintptr_t) unsafe.Pointer {
	c, ok := value[*cq](h)
	if !ok {
		return nil
	}
	return unsafe.Pointer(wakeOf(c.cq.Context()))
}

// sendNow sends, from the thread that posted, what a post has just given
// the engine, instead of leaving it to the device loop. A goroutine that a
// call from C makes runnable (the loop, woken by the post) waits in the run
// queue of the processor the C thread holds, and that processor stays idle
// with the thread back in C (a system call to the Go scheduler) until
// another one steals the goroutine or the runtime takes the processor back.
// The kernel's rxe sends from ibv_post_send's system call too. Device.Flush
// is safe beside the loop.
func (e *engine) sendNow() {
	if e != nil && e.roce != nil {
		if w, ok := wakeWords.Load(e.ctx); ok {
			atomic.StoreUint32(&w.(*wakeWord).owed, 0) // this flush sends it
		}
		e.roce.Flush(time.Now())
	}
}
