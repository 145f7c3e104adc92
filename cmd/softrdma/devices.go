package main

import (
	"fmt"
	"io"
	"os"

	"github.com/softrdma/softrdma/devinfo"
)

const devicesUsage = `usage: softrdma devices [-v] [--json] [--device SPEC]...

The devices a configuration gives, as ibv_devinfo and rdma link show kernel ones:
name, transport, port state, MTUs, the GID table with each entry's type, and the
interface and address under each; -v adds the device's and port's attributes
(ibv_devinfo -v's limits). They are the devices softrdma's verbs libraries show
(softrdma run): --device SPECs, else $SOFTRDMA_DEVICES, else the config file
($SOFTRDMA_CONFIG, else $XDG_CONFIG_HOME/softrdma/devices, else
/etc/softrdma/devices), else one roce and one iwarp device per interface that is
up with an address.

SPEC: roce:ADDR[,backend=udp|afpacket|tap][,iface=IFACE][,name=NAME]
      iwarp:ADDR[,iface=IFACE][,name=NAME]

flags:
`

// devicesCmd is "softrdma devices": flags and wiring; package devinfo
// describes the devices.
func devicesCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("devices", devicesUsage, stderr)
	verbose := fs.BoolP("verbose", "v", false, "the attributes too (ibv_devinfo -v's limits)")
	asJSON := fs.Bool("json", false, "JSON (snake_case keys) instead of text")
	specs := fs.StringArray("device", nil, "a device, SPEC (repeat for several); default: the configuration's")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softrdma devices: takes no arguments, got %q (a device is --device SPEC)\n", fs.Args())
		fs.Usage()
		return 2
	}
	list, _, err := devinfo.Resolve(*specs, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma devices: %v\n", err)
		return 1
	}
	devs, err := devinfo.Describe(list, *verbose)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma devices: %v\n", err)
		return 1
	}
	if *asJSON {
		err = devinfo.WriteJSON(stdout, devs)
	} else {
		err = devinfo.WriteText(stdout, devs, *verbose)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma devices: %v\n", err)
		return 1
	}
	return 0
}
