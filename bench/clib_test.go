package bench

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/netio/netns"
)

// TestListeningInProcessNamespace: listening finds a listener in the
// namespace of the process given, not in this process's: a python3
// listener in a network namespace of its own (unshare -n) is seen through
// its pid, and its port is not seen through a process of this namespace.
func TestListeningInProcessNamespace(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skipf("needs network namespaces: %v", err)
	}
	for _, tool := range []string{"unshare", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	cmd := exec.Command("unshare", "-n", "python3", "-c", `
import socket, sys, time
s = socket.socket()
s.bind(("0.0.0.0", 0))
s.listen()
print(s.getsockname()[1], flush=True)
sys.stdin.read()
`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("listener: %v", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if !listening(cmd.Process.Pid, port) {
		t.Errorf("port %d of pid %d (its own namespace): not listening", port, cmd.Process.Pid)
	}
	self := exec.Command("sleep", "30")
	if err := self.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { self.Process.Kill(); self.Wait() }()
	if listening(self.Process.Pid, port) {
		t.Errorf("port %d seen listening in this namespace, where nothing listens on it", port)
	}
}
