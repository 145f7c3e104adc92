//go:build cgo

package main

import (
	"fmt"
	"os"

	"github.com/softrdma/softrdma/counters"
)

// MetricsEnvVar is the environment variable that makes a program run with
// the libraries serve its devices' counters, as softrdma's --metrics ADDR
// does: Prometheus' text format on http://ADDR/metrics (ADDR is HOST:PORT,
// or PORT on 127.0.0.1; 0 a free port), read by softrdma stat.
const MetricsEnvVar = "SOFTRDMA_METRICS"

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
