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
	"runtime"
	"runtime/pprof"
	"sync"
)

// ProfileEnvVar names the file the CPU profile goes to.
const profileEnvVar = "SOFTRDMA_CPUPROFILE"

var profile struct {
	mu    sync.Mutex
	f     *os.File
	block string // SOFTRDMA_BLOCKPROFILE
}

// blockProfileEnvVar names the file a profile of where the library's
// goroutines wait goes to (Go's block and mutex profiles in one file,
// written at exit like the CPU profile): the verbs' Go halves run on the
// program's threads, and a wait on a lock there is a sleep of the program's
// thread.
const blockProfileEnvVar = "SOFTRDMA_BLOCKPROFILE"

func init() {
	if profile.block = os.Getenv(blockProfileEnvVar); profile.block != "" {
		runtime.SetBlockProfileRate(1)
		runtime.SetMutexProfileFraction(1)
	}
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
	if profile.block != "" {
		writeBlockProfile(profile.block)
		profile.block = ""
	}
	stopTrace()
	if profile.f == nil {
		return
	}
	pprof.StopCPUProfile()
	if err := profile.f.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", profileEnvVar, err)
	}
	profile.f = nil
}

// writeBlockProfile writes the block profile to name and the mutex profile
// to name.mutex.
func writeBlockProfile(name string) {
	for _, p := range []struct{ kind, file string }{{"block", name}, {"mutex", name + ".mutex"}} {
		f, err := os.Create(p.file)
		if err == nil {
			err = pprof.Lookup(p.kind).WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", blockProfileEnvVar, err)
		}
	}
}
