// Command softrdma is soft-RoCE and soft-iWARP in user space: demo, decode, and more.
package main

import (
	"fmt"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	case "decode":
		return runDecode(args[1:], os.Stdout, os.Stderr)
	case "demo":
		return demoCmd(args[1:], os.Stdout, os.Stderr)
	}
	fmt.Fprintf(os.Stderr, "softrdma: unknown command %q\n%s\n", args[0], usage)
	return 2
}

const usage = `usage: softrdma COMMAND [flags]

commands:
  decode FILE   explain a pcap/pcapng capture of RoCE and iWARP traffic, flow by flow
  demo          two nodes on a simulated network: SEND, WRITE, READ and atomics, verified`
