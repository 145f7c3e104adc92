//go:build cgo

package main

import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/counters"
)

// DumpEnvVar (counters.DumpEnvVar) names the file the counters go to when
// the program exits (exit() or a return from main): JSON if it ends in
// .json, else softrdma stat's lines; "-" is stderr; %p in it is the PID, so
// that the processes of one command line write a file each. The destructor
// that calls srgo_dump_counters is in metrics_c.go.
const DumpEnvVar = counters.DumpEnvVar

//export srgo_dump_counters
func srgo_dump_counters() {
	name := os.Getenv(DumpEnvVar)
	if name == "" {
		return
	}
	s := counters.Default.Snapshot()
	if name == "-" {
		counters.WriteText(os.Stderr, s)
		return
	}
	name = strings.ReplaceAll(name, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(name)
	if err == nil {
		if strings.HasSuffix(name, ".json") {
			err = counters.WriteJSON(f, s)
		} else {
			err = counters.WriteText(f, s)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", DumpEnvVar, err)
	}
}

// MetricsEnvVar (counters.MetricsEnvVar) makes a program run with the
// libraries serve its devices' counters, as softrdma's --metrics ADDR does:
// Prometheus' text format on http://ADDR/metrics (ADDR is HOST:PORT, or
// PORT on 127.0.0.1; 0 a free port), read by softrdma stat.
const MetricsEnvVar = counters.MetricsEnvVar

// The server starts when the library loads and runs for the process's
// life; the address goes to stderr. A failure (the port taken, say) is said
// on stderr and the program runs on without it.
func init() {
	addr := os.Getenv(MetricsEnvVar)
	if addr == "" {
		return
	}
	srv, err := counters.Serve(addr, counters.Default)
	if err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s=%s: %v\n", MetricsEnvVar, addr, err)
		return
	}
	fmt.Fprintf(os.Stderr, "softrdma: counters on %s\n", srv.URL())
}
