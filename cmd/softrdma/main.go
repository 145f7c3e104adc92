// Command softrdma is soft-RoCE and soft-iWARP in user space: demo, decode, and more.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	return runCommand(args, os.Stdout, os.Stderr)
}

// commands is the command table: each subcommand by name, its one-line
// summary (softrdma help lists them), and its entry point, which parses its
// own flags (parseFlags) and returns the exit code.
var commands = []struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}{
	{"devices", "the devices a configuration gives, as ibv_devinfo -v and rdma link show them", devicesCmd},
	{"stat", "counters per device and per QP, as rdma statistic: of a running process (--from ADDR)", statCmd},
	{"run", "run an unmodified verbs program (ibv_*, perftest, rping...) on softrdma's libibverbs/librdmacm", runCmd},
	{"decode", "explain a pcap/pcapng capture of RoCE and iWARP traffic, flow by flow", runDecode},
	{"demo", "two nodes on a simulated network: SEND, WRITE, READ and atomics, verified", demoCmd},
	{"pingpong", "ibv_rc_pingpong / ibv_ud_pingpong / ibv_uc_pingpong over RoCEv2", pingpongCmd},
	{"perf", "perftest's ib_{write,read,send,atomic}_bw and ib_{write,read,send}_lat over RoCEv2", perfCmd},
	{"rping", "rdma-core's rping over iWARP (or --transport roce)", rpingCmd},
	{"cmatose", "librdmacm's ucmatose (RC) or, with --ud, udaddy (UD) over RoCEv2", cmatoseCmd},
	{"bench", "the benchmark suite: softrdma against the raw UDP/TCP path between two namespaces (root)", benchCmd},
	{"conform", "the protocol conformance suite: --self, --peer HOST, or serve", conformCmd},
	{"version", "print softrdma's version, commit and Go version", versionCmd},
	{"help", "help CMD prints CMD's usage (as CMD --help); help alone lists the commands", nil},
}

// runCommand runs the subcommand args[0] with the rest of args.
func runCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "-h", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	case "--version":
		return versionCmd(args[1:], stdout, stderr)
	case "help":
		return helpCmd(args[1:], stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] && c.run != nil {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "softrdma: unknown command %q\n%s", args[0], usage())
	return 2
}

// helpCmd is "softrdma help [CMD]": with no CMD the command list on stdout;
// with CMD, CMD's own usage, the text "softrdma CMD --help" prints, on
// stdout; an unknown CMD is an error naming it, exit 2.
func helpCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("help", helpUsage, stderr)
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	args = fs.Args()
	switch len(args) {
	case 0:
		fmt.Fprint(stdout, usage())
		return 0
	case 1:
	default:
		fmt.Fprintf(stderr, "softrdma help: one command at most, got %q\n", args)
		fs.Usage()
		return 2
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		if c.run == nil { // help help
			fmt.Fprint(stdout, usage())
			return 0
		}
		// CMD --help prints its usage on stderr (pflag's Usage); help
		// asked for it, so it goes to stdout.
		return c.run([]string{"--help"}, stdout, stdout)
	}
	fmt.Fprintf(stderr, "softrdma help: unknown command %q\n%s", args[0], usage())
	return 2
}

const helpUsage = `usage: softrdma help [COMMAND]

Without COMMAND the list of commands; with one, its usage and flags (what
softrdma COMMAND --help prints), on stdout.

flags:
`

// usage is the top-level usage: every subcommand with its one-line summary.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: softrdma COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	b.WriteString("\nsoftrdma help COMMAND (or softrdma COMMAND --help) shows a command's flags.\n")
	return b.String()
}
