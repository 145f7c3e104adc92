package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
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

// byteSize is a flag of octets: a whole number with an optional K, M or G
// suffix (powers of 1024), so 256M and 268435456 are the same.
type byteSize int64

func (b *byteSize) String() string {
	v := int64(*b)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"G", 30}, {"M", 20}, {"K", 10}} {
		if v != 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatInt(v>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}

func (b *byteSize) Set(s string) error {
	shift := uint(0)
	num := s
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			shift, num = 10, s[:n-1]
		case 'M', 'm':
			shift, num = 20, s[:n-1]
		case 'G', 'g':
			shift, num = 30, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64>>shift {
		return fmt.Errorf("want a number of octets, with K, M or G for 2^10, 2^20 or 2^30")
	}
	*b = byteSize(v << shift)
	return nil
}

func (b *byteSize) Type() string { return "size" }
