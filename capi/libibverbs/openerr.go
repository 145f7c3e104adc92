//go:build cgo

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/softrdma/softrdma/devspec"
)

// openError is the error of a device s that failed to open (package
// device's, whose AddrInUse hint names softrdma run's --device when a RoCE
// device's address:4791 is taken: the other side of a two-terminal run on
// one host on the same address, or the kernel's rdma_rxe). That one is
// printed whether SOFTRDMA_DEBUG is set or not: the program says only
// "Couldn't allocate PD", and the user must learn what to type instead.
func openError(s devspec.Spec, err error) error {
	err = fmt.Errorf("open %s: %w", s, err)
	if errors.Is(err, syscall.EADDRINUSE) {
		fmt.Fprintf(os.Stderr, "softrdma: %v\n", err)
	}
	return err
}
