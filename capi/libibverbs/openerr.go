//go:build cgo

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	softdevice "github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
)

// openError is the error of a RoCE device s that failed to open. Its
// address:4791 taken (the other side of a two-terminal run on one host on
// the same address, or the kernel's rdma_rxe) gets package device's AddrInUse hint,
// with softrdma run's --device, and is printed whether SOFTRDMA_DEBUG is set
// or not: the program says only "Couldn't allocate PD", and the user must
// learn what to type instead.
func openError(s devspec.Spec, err error) error {
	err = fmt.Errorf("open %s: %w", s, err)
	if s.Backend == devspec.BackendUDP || s.Backend == "" {
		if errors.Is(err, syscall.EADDRINUSE) {
			err = softdevice.AddrInUse(s.Addr, "--device roce:", err)
			fmt.Fprintf(os.Stderr, "softrdma: %v\n", err)
		}
	}
	return err
}
