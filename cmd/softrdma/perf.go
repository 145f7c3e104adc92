package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/perf"
)

// perfCmd is softrdma perf: perftest's tools (package perf).
func perfCmd(args []string, stdout, stderr io.Writer) int {
	o, metrics, report, err := perfParseArgs(args, stderr)
	if err != nil {
		var fe *flagsError
		if errors.Is(err, pflag.ErrHelp) || errors.As(err, &fe) {
			return flagsExit(err) // parseFlags has said why
		}
		fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
		return 2
	}
	if o.RunInfinitely {
		// --run_infinitely runs until it is stopped: Ctrl-C or SIGTERM ends
		// it with the table closed and exit status 0.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		o.Context = ctx
	}
	return metrics.run("perf", stderr, func() int {
		code := perf.Main(o, stdout, stderr)
		if *report {
			counters.WriteReport(stdout, o.JSON, metrics.snapshot())
		}
		return code
	})
}

// perfParseArgs parses perftest's command line: flags, TEST, HOST.
// It adds --metrics, --dump-counters and --report-counters (print the
// counters after the result) to perftest's flags.
func perfParseArgs(args []string, stderr io.Writer) (*perf.Options, *metricsFlags, *bool, error) {
	o := &perf.Options{}
	fs := newFlagSet("perf", perf.Usage, stderr)
	o.AddFlags(fs)
	metrics := addMetricsFlags(fs)
	report := fs.Bool("report-counters", false, "print the devices' counters after the result (softrdma stat's lines; with --json a second JSON document, {\"counters\": ...})")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, nil, nil, err
	}
	if err := o.SetArgs(fs); err != nil {
		if errors.Is(err, perf.ErrNoTest) {
			fs.Usage()
		}
		return nil, nil, nil, err
	}
	return o, metrics, report, nil
}
