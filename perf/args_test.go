package perf

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// parseArgs parses a perftest command line as softrdma perf does
// (cmd/softrdma's perfParseArgs), for the tests.
func parseArgs(args []string, stderr io.Writer) (*Options, error) {
	o := &Options{}
	fs := pflag.NewFlagSet("perf", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, Usage); fs.PrintDefaults() }
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
			fs.Usage()
		}
		return nil, flagsError{err}
	}
	if err := o.SetArgs(fs); err != nil {
		if errors.Is(err, ErrNoTest) {
			fs.Usage()
		}
		return nil, err
	}
	return o, nil
}

// command runs a perftest command line as softrdma perf does, for the tests:
// exit code 2 for a bad command line, else Main's.
func command(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		if errors.As(err, new(flagsError)) {
			return 2 // parseArgs has said why
		}
		fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
		return 2
	}
	return Main(o, stdout, stderr)
}

// flagsError is a parse error parseArgs has reported.
type flagsError struct{ error }

func (e flagsError) Unwrap() error { return e.error }
