package main

import (
	"fmt"
	"os"
)

// debugf prints to stderr when SOFTRDMA_DEBUG is set: why a verb was refused.
// It is plain Go (no cgo) so the cgo-free files that log, like siwmodify.go,
// build and vet with CGO_ENABLED=0 too.
func debugf(format string, a ...any) {
	if debugOn() {
		fmt.Fprintf(os.Stderr, "softrdma: "+format+"\n", a...)
	}
}

// debugOn reports whether SOFTRDMA_DEBUG is set.
func debugOn() bool { return os.Getenv("SOFTRDMA_DEBUG") != "" }
