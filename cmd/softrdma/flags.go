package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
)

// newFlagSet is the flag set of the subcommand "softrdma name": parse errors
// come back from Parse instead of exiting, and its usage (for --help and
// after a bad flag) is usageText, which ends with "flags:\n", followed by the
// flags and their defaults, all on stderr.
func newFlagSet(name, usageText string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	return fs
}

// flagsError is a parse error parseFlags has already reported on stderr.
type flagsError struct{ err error }

func (e *flagsError) Error() string { return e.err.Error() }
func (e *flagsError) Unwrap() error { return e.err }

// parseFlags parses args into fs, the one way every subcommand does. With
// -h or --help pflag has printed the usage and it returns pflag.ErrHelp; a
// mistyped or unknown flag, or a bad value, is printed on stderr as
// "softrdma NAME: ERROR" followed by the usage, and returned as a
// *flagsError (pflag with ContinueOnError prints nothing itself, so without
// this a bad flag ended the command silently). flagsExit gives the exit code.
func parseFlags(fs *pflag.FlagSet, args []string, stderr io.Writer) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return err
	}
	fmt.Fprintf(stderr, "softrdma %s: %v\n", fs.Name(), err)
	fs.Usage()
	return &flagsError{err}
}

// flagsExit is the exit code of a command whose parseFlags failed with err:
// 0 after --help, 2 after a bad flag.
func flagsExit(err error) int {
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	return 2
}

// flagRange is one numeric flag's range check: the flag as the user wrote it
// (e.g. "--loss" or "-s"), its value, and whether the value is in range,
// described by want ("a probability in [0, 1]"). checkFlags reports the first
// one out of range as "FLAG VALUE: want WANT", before anything starts.
type flagRange struct {
	flag  string
	value any
	ok    bool
	want  string
}

// checkFlags returns an error naming the first flag of checks out of its range.
func checkFlags(checks ...flagRange) error {
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("%s %v: want %s", c.flag, c.value, c.want)
		}
	}
	return nil
}

// intRange checks lo <= v <= hi.
func intRange[T ~int | ~int64 | ~uint64](flag string, v, lo, hi T) flagRange {
	return flagRange{flag, v, lo <= v && v <= hi, fmt.Sprintf("%v to %v", lo, hi)}
}

// floatRange checks lo <= v <= hi (NaN is out of every range).
func floatRange(flag string, v, lo, hi float64, what string) flagRange {
	return flagRange{flag, v, lo <= v && v <= hi, fmt.Sprintf("%s in [%g, %g]", what, lo, hi)}
}

// durationRange checks lo <= v <= hi.
func durationRange(flag string, v, lo, hi time.Duration) flagRange {
	return flagRange{flag, v, lo <= v && v <= hi, fmt.Sprintf("a duration from %v to %v", lo, hi)}
}

// durationNonNegative checks v >= 0 (durations with no upper bound).
func durationNonNegative(flag string, v time.Duration) flagRange {
	return flagRange{flag, v, v >= 0, "a duration of 0 or more"}
}
