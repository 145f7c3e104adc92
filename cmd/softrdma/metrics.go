package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/softrdma/softrdma/counters"
)

// metricsFlags are the counter flags of the long-running commands (perf,
// pingpong, rping, conform serve): --metrics ADDR serves the process's
// counters (package counters) in Prometheus' text format while it runs;
// --dump-counters FILE writes them when the command ends.
type metricsFlags struct {
	addr, dump string
	mark       uint64
	srv        *counters.Server
}

// addMetricsFlags adds --metrics and --dump-counters to fs.
func addMetricsFlags(fs *pflag.FlagSet) *metricsFlags {
	m := &metricsFlags{}
	fs.StringVar(&m.addr, "metrics", "", "serve the counters on http://ADDR/metrics (Prometheus' text format); "+
		"ADDR is HOST:PORT, or PORT on 127.0.0.1 (0: a free port, printed on stderr)")
	fs.StringVar(&m.dump, "dump-counters", "", "write the counters to FILE when done (JSON if FILE ends in .json; - for stderr)")
	return m
}

// start marks the devices this command opens and serves the counters if
// --metrics asked, saying where on stderr.
func (m *metricsFlags) start(name string, stderr io.Writer) error {
	m.mark = counters.Default.Mark()
	if m.addr == "" {
		return nil
	}
	srv, err := counters.Serve(m.addr, counters.Default)
	if err != nil {
		return fmt.Errorf("--metrics %s: %w", m.addr, err)
	}
	m.srv = srv
	fmt.Fprintf(stderr, "softrdma %s: counters on %s\n", name, srv.URL())
	return nil
}

// snapshot is the counters of the devices opened since start.
func (m *metricsFlags) snapshot() counters.Snapshot { return counters.Default.Since(m.mark) }

// stop writes --dump-counters and stops --metrics' server; an error is
// reported on stderr and makes the exit code 1 if it was 0.
func (m *metricsFlags) stop(name string, code int, stderr io.Writer) int {
	if m.srv != nil {
		m.srv.Close()
	}
	if m.dump == "" {
		return code
	}
	if err := counters.Dump(m.dump, stderr, m.snapshot()); err != nil {
		fmt.Fprintf(stderr, "softrdma %s: --dump-counters: %v\n", name, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// run runs a command's work between start and stop: the exit code is
// run's, or 1 if --metrics could not start or --dump-counters failed.
func (m *metricsFlags) run(name string, stderr io.Writer, run func() int) int {
	if err := m.start(name, stderr); err != nil {
		fmt.Fprintf(stderr, "softrdma %s: %v\n", name, err)
		return 1
	}
	return m.stop(name, run(), stderr)
}
