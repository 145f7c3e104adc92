package main

import "C"

import (
	"fmt"
	"os"
	"runtime/trace"
)

// traceEnvVar names the file an execution trace of the library's Go side
// goes to (go tool trace: which thread runs the verbs' Go halves, the
// device loop and the reader, and what wakes them), from when the library
// loads to the program's exit, written like the CPU profile.
const traceEnvVar = "SOFTRDMA_TRACE"

var traceFile *os.File

func init() {
	name := os.Getenv(traceEnvVar)
	if name == "" {
		return
	}
	f, err := os.Create(name)
	if err == nil {
		if err = trace.Start(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", traceEnvVar, err)
		return
	}
	traceFile = f
}

// stopTrace ends the trace and closes its file (at exit, srgo_stop_profile).
func stopTrace() {
	if traceFile == nil {
		return
	}
	trace.Stop()
	if err := traceFile.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", traceEnvVar, err)
	}
	traceFile = nil
}
