package device_test

import (
	"fmt"
	"log"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
)

// Open a device from its description, the form softrdma run --device and
// SOFTRDMA_DEVICES take (roce:ADDR or iwarp:ADDR, with backend=, iface= and
// name= options): here RoCEv2 over a UDP socket on a loopback address, which
// needs no privileges. The device's verbs engine is d.Context(); StartCM puts
// rdma_cm on it (see package rdmacm's examples).
func ExampleOpen() {
	spec, err := devspec.Parse("roce:127.77.3.1")
	if err != nil {
		log.Fatal(err)
	}
	d, err := device.Open(spec, device.Config{})
	if err != nil {
		log.Fatal(err) // e.g. 127.77.3.1:4791 in use: the error says what to type instead
	}
	defer d.Close()
	fmt.Println("opened", d.Spec())
	fmt.Println("sends from", d.Local(), "with path MTU", d.PathMTU())
	fmt.Println("GID", d.GIDs()[1])

	// A description that does not parse says why.
	_, err = devspec.Parse("rdma:127.0.0.1")
	fmt.Println(err)
	// Output:
	// opened roce:127.77.3.1
	// sends from 127.77.3.1 with path MTU 4096
	// GID ::ffff:127.77.3.1
	// device spec "rdma:127.0.0.1": transport "rdma": want roce or iwarp
}
