package tcploop

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePort: the port is below the kernel's ephemeral range, where no
// port-0 listener or outgoing connection is given one, and can be listened on
// on every address.
func TestFreePort(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		p := FreePort(t)
		if p < freePortMin || p >= low {
			t.Fatalf("port %d outside [%d, %d)", p, freePortMin, low)
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
	}
}
