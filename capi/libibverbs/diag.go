package main

import "C"

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"
)

// Under SOFTRDMA_DEBUG, SIGQUIT makes the library write what a hung program
// is waiting for to stderr and end the process with status 2, as SIGQUIT does
// to a Go program: every goroutine's stack, then the state of every QP of
// every device the process opened (ibtransport's StateReport: queues, PSNs,
// timer, RNR waits, retransmissions, NAKs). Go's own SIGQUIT dump is not there
// in a C program: the runtime of a c-shared library leaves the asynchronous
// signals to the program. The tests send SIGQUIT to a pair that is still
// running at their deadline, so that the failure says why it hung. Without
// SOFTRDMA_DEBUG, SIGQUIT is the program's, as it would be with rdma-core.
func init() {
	if os.Getenv("SOFTRDMA_DEBUG") == "" {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGQUIT)
	go func() {
		<-ch
		dumpState(os.Stderr)
		os.Exit(2)
	}()
}

// dumpState writes the goroutines' stacks and then each engine's state. The
// stacks come first: a report blocked on a lock held by a stuck goroutine
// gives up after a second and says so.
func dumpState(w io.Writer) {
	fmt.Fprintf(w, "softrdma: SIGQUIT (SOFTRDMA_DEBUG): pid %d, goroutines:\n", os.Getpid())
	pprof.Lookup("goroutine").WriteTo(w, 2)
	done := make(chan string, 1)
	go func() { done <- engineStates(time.Now()) }()
	select {
	case s := <-done:
		fmt.Fprint(w, s)
	case <-time.After(time.Second):
		fmt.Fprintln(w, "softrdma: the engines' state: no answer in 1 s (a lock is held; see the stacks above)")
	}
}

// engineStates describes the QPs of every opened device, in device order.
func engineStates(now time.Time) string {
	engines.mu.Lock()
	idx := make([]C.int, 0, len(engines.m))
	for i := range engines.m {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	es := make([]*engine, len(idx))
	for k, i := range idx {
		es[k] = engines.m[i]
	}
	engines.mu.Unlock()
	devs := loadDevices()
	s := fmt.Sprintf("softrdma: %d device(s) opened for traffic\n", len(es))
	for k, e := range es {
		name := fmt.Sprint("device ", idx[k])
		if i := int(idx[k]); i < len(devs) {
			name = devs[i].Spec.Name
		}
		s += fmt.Sprintf("softrdma: %s: %s", name, e.ctx.StateReport(now))
	}
	return s
}
