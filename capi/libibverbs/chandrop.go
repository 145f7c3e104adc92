package main

// #include <stdint.h>
import "C"

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// chanLocks serialise the writes to a completion channel's pipe (by its
// write end) with dropEvents, which takes the pipe's content out and puts
// back what it keeps.
var chanLocks sync.Map // int → *sync.Mutex

func chanLock(wfd int) *sync.Mutex {
	if m, ok := chanLocks.Load(wfd); ok {
		return m.(*sync.Mutex)
	}
	m, _ := chanLocks.LoadOrStore(wfd, new(sync.Mutex))
	return m.(*sync.Mutex)
}

// srgo_drop_cq_events takes the events of the CQ ptr that nobody read out of
// its channel's pipe (read end rfd, write end wfd), as the kernel drops a
// destroyed CQ's events from its completion channel (ib_uverbs_release_ucq):
// the channel is no longer readable for them, and no ibv_get_cq_event hands
// out the freed CQ. The CQ's forwarder has stopped. Reads do not wait
// (RWF_NOWAIT): a program thread reading the channel meanwhile may have
// taken what was there. It returns 0 (SRGO wants a value).
//
//export srgo_drop_cq_events
func srgo_drop_cq_events(rfd, wfd C.int, ptr C.uint64_t) C.int {
	dropEvents(int(rfd), int(wfd), uint64(ptr))
	return 0
}

func dropEvents(rfd, wfd int, ptr uint64) {
	mu := chanLock(wfd)
	mu.Lock()
	defer mu.Unlock()
	n, err := unix.IoctlGetInt(rfd, unix.TIOCINQ) // FIONREAD
	if err != nil || n < 8 {
		return
	}
	buf := make([]byte, n)
	got := 0
	for got < len(buf) {
		m, err := unix.Preadv2(rfd, [][]byte{buf[got:]}, -1, unix.RWF_NOWAIT)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		got += m
	}
	var drop [8]byte
	binary.NativeEndian.PutUint64(drop[:], ptr)
	keep := buf[:0]
	for i := 0; i+8 <= got; i += 8 {
		if !bytes.Equal(buf[i:i+8], drop[:]) {
			keep = append(keep, buf[i:i+8]...)
		}
	}
	for len(keep) > 0 {
		m, err := syscall.Write(wfd, keep)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			debugf("completion channel: putting back events: %v", err)
			return
		}
		keep = keep[m:]
	}
}

// srgo_mallocs is the number of heap allocations the Go side has made
// (SOFTRDMA_STATS): what a program's messages cost beyond their setup.
//
//export srgo_mallocs
func srgo_mallocs() C.uint64_t {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return C.uint64_t(m.Mallocs)
}
