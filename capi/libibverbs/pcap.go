package main

import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	softdevice "github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
)

// PcapEnvVar (devspec.PcapEnvVar) names the file a program's traffic is
// captured into: each device the program opens records its frames there
// through package device, as every softrdma command's --pcap does (pcapng
// for FILE.pcapng, classic pcap otherwise; %p in it is the PID). A second
// device of the same process writes FILE with .1 before its extension, a
// third .2, and so on. The file is flushed when the program exits (exit()
// or a return from main: the destructor in pcap_c.go); a program killed by
// a signal loses what was still buffered.
const PcapEnvVar = devspec.PcapEnvVar

// captures are the devices opened with a capture, flushed at exit.
var captures struct {
	mu   sync.Mutex
	n    int // files named so far
	devs []interface{ FlushCapture() error }
}

// pcapFile returns the capture file of the next device opened, or "" when
// PcapEnvVar is unset or its file cannot be created (said on stderr: the
// program runs on without a capture, as it does without SOFTRDMA_METRICS'
// server).
func pcapFile() string {
	name := os.Getenv(PcapEnvVar)
	if name == "" {
		return ""
	}
	name = strings.ReplaceAll(name, "%p", strconv.Itoa(os.Getpid()))
	captures.mu.Lock()
	n := captures.n
	captures.n++
	captures.mu.Unlock()
	if n > 0 {
		ext := filepath.Ext(name)
		name = strings.TrimSuffix(name, ext) + "." + strconv.Itoa(n) + ext
	}
	f, err := os.Create(name)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v (no capture)\n", PcapEnvVar, err)
		return ""
	}
	return name
}

// addCapture keeps dev, opened with a capture, for srgo_flush_captures.
func addCapture(dev softdevice.Device) {
	c, ok := dev.(interface{ FlushCapture() error })
	if !ok {
		return
	}
	captures.mu.Lock()
	defer captures.mu.Unlock()
	captures.devs = append(captures.devs, c)
}

// srgo_flush_captures writes out what the captures still buffer, so that
// each file is complete when the program has exited. The devices stay open
// (the program's other destructors may still use them).
//
//export srgo_flush_captures
func srgo_flush_captures() {
	captures.mu.Lock()
	defer captures.mu.Unlock()
	for _, c := range captures.devs {
		if err := c.FlushCapture(); err != nil {
			fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", PcapEnvVar, err)
		}
	}
}
