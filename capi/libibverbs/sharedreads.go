package main

// The program's thread reads the device's socket while it waits for a
// completion (netio.SharedReads): sr_poll_idle (verbs_c.go) waits in poll(2)
// on the RoCE device's UDP socket and on an eventfd that completions made
// elsewhere signal, and when the socket has datagrams it hands them to the
// engine itself (srgo_rx), then polls its CQ. One thread wakes per message,
// as in a Go program, instead of the device's reader goroutine and then,
// woken by it, the program's thread: under load the second wake-up waited
// for the CPU behind the reader's remaining work and other processes
// (ib_send_lat's client, Go execution trace: median 17 us from the reader's
// wake-up of the thread to the thread running again).

// #include <stdint.h>
import "C"

import (
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/netio"
	"golang.org/x/sys/unix"
)

// pollReadsEnvVar turns the shared reads off ("0"; on by default).
const pollReadsEnvVar = "SOFTRDMA_POLL_READS"

func init() {
	netio.SharedReads.Store(os.Getenv(pollReadsEnvVar) != "0")
}

// lendNever is wakeWord.lent for a device whose reads cannot be lent.
const lendNever = 2

// rxReads counts the srgo_rx calls that found datagrams (SOFTRDMA_STATS).
var rxReads atomic.Uint64

// srgo_rx_reads is rxReads, for SOFTRDMA_STATS's line at exit.
//
//export srgo_rx_reads
func srgo_rx_reads() C.uint64_t { return C.uint64_t(rxReads.Load()) }

// signalPoller wakes a thread waiting in sr_poll_idle's poll(2).
func (w *wakeWord) signalPoller() {
	if fd := atomic.LoadInt32(&w.cefd); fd >= 0 {
		one := uint64(1)
		unix.Write(int(fd), (*[8]byte)(unsafe.Pointer(&one))[:])
	}
}

// idleLimit is how long after its last idle poll a program's thread still
// counts as polling (the reader goroutine takes the reads back after it).
const idleLimit = 2 * time.Millisecond

func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// srgo_lend lends the reads of the device behind the CQ h to the
// program's threads; it sets the word's sock and lent, or leaves them
// (the device's endpoint does not share its reads).
//
//export srgo_lend
func srgo_lend(h C.uintptr_t) C.int {
	c, ok := value[*cq](h)
	if !ok {
		return 0
	}
	w := wakeOf(c.cq.Context())
	e := engineFor(c.cq.Context())
	var ep netio.ReadLender
	if e != nil && e.roce != nil {
		// A UDP endpoint, or a capture of one (SOFTRDMA_PCAP), which
		// forwards LendReads and records what the program's thread reads.
		ep, _ = e.roce.Endpoint().(netio.ReadLender)
	}
	if ep == nil || !netio.SharedReads.Load() {
		// Not a RoCE device on a UDP socket (iWARP, a raw backend): its
		// reader goroutine reads, and the program's threads wait on the
		// futex without asking again.
		atomic.StoreUint32(&w.lent, lendNever)
		return 0
	}
	if atomic.LoadInt32(&w.cefd) < 0 {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			atomic.StoreUint32(&w.lent, lendNever)
			return 0
		}
		atomic.StoreInt32(&w.cefd, int32(fd))
	}
	atomic.StoreInt64(&w.lastPoll, monoNow())
	sock, ok := ep.LendReads(func() bool {
		if atomic.SwapUint32(&w.owed, 0) != 0 {
			e.roce.Flush(time.Now())
		}
		if atomic.LoadUint32(&w.cwaiting) != 0 || monoNow()-atomic.LoadInt64(&w.lastPoll) < int64(idleLimit) {
			return true
		}
		atomic.StoreUint32(&w.lent, 0)
		return false
	})
	if !ok {
		atomic.StoreUint32(&w.lent, lendNever)
		return 0
	}
	atomic.StoreInt32(&w.sock, int32(sock))
	atomic.StoreUint32(&w.lent, 1)
	return 1
}

// srgo_flush_owed sends what srgo_rx left to the program's next flush
// (wakeWord.owed), before the program's thread waits.
//
//export srgo_flush_owed
func srgo_flush_owed(h C.uintptr_t) C.int {
	c, ok := value[*cq](h)
	if !ok {
		return 0
	}
	e := engineFor(c.cq.Context())
	if e == nil || e.roce == nil {
		return 0
	}
	atomic.StoreUint32(&wakeOf(e.ctx).owed, 0)
	e.roce.Flush(time.Now())
	return 1
}

// srgo_rx hands the datagrams waiting on the socket of the device behind
// the CQ h to its engine and sends what they call for (roce.Device.Poll),
// unless another thread is doing so.
//
//export srgo_rx
func srgo_rx(h C.uintptr_t) C.int {
	c, ok := value[*cq](h)
	if !ok {
		return 0
	}
	e := engineFor(c.cq.Context())
	if e == nil || e.roce == nil || !e.rxMu.TryLock() {
		return 0
	}
	defer e.rxMu.Unlock()
	e.ctx.SetQuietWakes(true)
	moved, _ := e.roce.PollInput(time.Now())
	e.ctx.SetQuietWakes(false)
	if moved {
		rxReads.Add(1)
	}
	if e.ctx.HasOutput() {
		// The ACKs go with the program's answer, if it posts one before it
		// waits again (sr_wait_socket flushes then), or at the reader's
		// next check (LendReads' active).
		atomic.StoreUint32(&wakeOf(e.ctx).owed, 1)
	}
	return 1
}
