package main

// A CPU profile of the library inside a C program: SOFTRDMA_CPUPROFILE=FILE
// starts Go's CPU profiler when the library loads and writes FILE when the
// program exits (exit() or a return from main, not a fatal signal). It shows
// where the Go side spends its time (the engine, the device loop, the verbs'
// Go halves); `perf record` shows the C side and the kernel beside it.

// The destructor that stops it is in prof_c.go (cgo copies the preamble of a
// file with //export into _cgo_export.c, which would run it twice).

import "C"

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
)

// ProfileEnvVar names the file the CPU profile goes to.
const profileEnvVar = "SOFTRDMA_CPUPROFILE"

var profile struct {
	mu sync.Mutex
	f  *os.File
}

func init() {
	name := os.Getenv(profileEnvVar)
	if name == "" {
		return
	}
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", profileEnvVar, err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", profileEnvVar, err)
		f.Close()
		return
	}
	profile.f = f
}

//export srgo_stop_profile
func srgo_stop_profile() {
	profile.mu.Lock()
	defer profile.mu.Unlock()
	if profile.f == nil {
		return
	}
	pprof.StopCPUProfile()
	if err := profile.f.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", profileEnvVar, err)
	}
	profile.f = nil
}
