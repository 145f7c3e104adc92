package perf

import (
	"fmt"

	"github.com/softrdma/softrdma/device"
)

// checkInline refuses an -I above the device's inline limit (its engine's
// MaxInlineData), known as soon as the device is open: a server checks it
// before it listens, so that it fails at start with the cause instead of
// after a client has connected (and the client sees the server hang up).
func checkInline(dev device.Device, p *params) error {
	if max := dev.Context().Config().MaxInlineData; p.inline > max {
		return fmt.Errorf("-I %d: the device's inline limit is %d bytes", p.inline, max)
	}
	return nil
}
