package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/softrdma/softrdma/launch"
)

const runUsage = `usage: softrdma run [--device SPEC]... [--lib DIR] [--metrics ADDR] [--dump-counters FILE] [--pcap FILE] [--] PROGRAM [ARGS]

Runs PROGRAM, an unmodified verbs program (ibv_devices, ibv_devinfo, ibv_rc_pingpong,
ib_write_bw, rping...), on softrdma: its libibverbs.so.1 and librdmacm.so.1 (make lib)
come first on LD_LIBRARY_PATH and the devices are the --device SPECs. softrdma becomes
PROGRAM (exec): its exit status and signals are PROGRAM's own.

SPEC: roce:ADDR[,backend=udp|afpacket|tap][,iface=IFACE][,kernel-addr=PREFIX][,name=NAME]
      iwarp:ADDR[,iface=IFACE][,name=NAME]
backend=tap: the device is a host behind a new TAP device (IFACE, else tapN);
kernel-addr=PREFIX (10.9.0.1/24, holding ADDR) goes to the TAP's kernel side.
Devices are named NAME, else sr_roceN / sr_iwarpN in the order given. Without --device:
$SOFTRDMA_DEVICES, else the config file ($SOFTRDMA_CONFIG, else
$XDG_CONFIG_HOME/softrdma/devices, else /etc/softrdma/devices: one SPEC per line, #
comments), else one roce and one iwarp device per interface that is up (lo's 127.0.0.1
only when no other interface has an address).
The libraries: --lib DIR, else $SOFTRDMA_LIB, else lib/ beside the binary's bin/.

flags:
`

// runCmd is `softrdma run`: flags and wiring; launch.Prepare does the work,
// then softrdma execs the program.
func runCmd(args []string, stdout, stderr io.Writer) int {
	var o launch.Options
	fs := newFlagSet("run", runUsage, stderr)
	// The first argument that is not a flag starts PROGRAM: its own flags
	// (ibv_rc_pingpong -d ...) are not softrdma's, with or without "--".
	fs.SetInterspersed(false)
	fs.StringArrayVar(&o.Devices, "device", nil, "a device, SPEC (repeat for several)")
	fs.StringVar(&o.Lib, "lib", "", "the directory holding libibverbs.so.1 (default: $SOFTRDMA_LIB, else BIN/../lib)")
	fs.StringVar(&o.Metrics, "metrics", "", "serve PROGRAM's counters on http://ADDR/metrics (SOFTRDMA_METRICS; PORT alone is on 127.0.0.1)")
	fs.StringVar(&o.DumpCounters, "dump-counters", "", "write PROGRAM's counters to FILE when it exits (SOFTRDMA_COUNTERS_DUMP; %p: its PID)")
	fs.StringVar(&o.Pcap, "pcap", "", "capture PROGRAM's traffic into FILE, pcapng for FILE.pcapng, else pcap (SOFTRDMA_PCAP; %p: its PID)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if rest := fs.Args(); len(rest) > 0 {
		o.Program, o.Args = rest[0], rest[1:]
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "softrdma run: %v\n", err)
		return 1
	}
	c, err := launch.Prepare(o, os.Environ(), exe)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma run: %v\n", err)
		var ee *launch.ExitError
		if errors.As(err, &ee) {
			if ee.Code == 2 && o.Program == "" {
				fs.Usage()
			}
			return ee.Code
		}
		return 1
	}
	err = syscall.Exec(c.Path, c.Argv, c.Env)
	// Exec returns only when it failed.
	fmt.Fprintf(stderr, "softrdma run: %s: %v\n", c.Path, err)
	return 126
}
