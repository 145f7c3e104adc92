package main

import (
	"errors"
	"fmt"
	"io"

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
