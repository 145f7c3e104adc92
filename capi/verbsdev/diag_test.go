package verbsdev_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/devspec"
)

// TestDebugQuit sends SIGQUIT to a waiting program on the library under
// SOFTRDMA_DEBUG (perftest -R's server, listening): the library must write
// the goroutines' stacks and the state of each QP of its device, and end the
// process with status 2, as a Go program does. This is what cmPair's failures
// show of a pair that hung (before, SIGQUIT killed the process with no word:
// a c-shared Go runtime leaves the signal to the program).
func TestDebugQuit(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "ib_read_lat")
	addr := randomNet() + "1"
	cmd := exec.Command("ib_read_lat", "-R", "-d", "sr_roce0", "-p", fmt.Sprint(20000+rand.IntN(20000)))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"=roce:"+addr, "SOFTRDMA_DEBUG=1")
	out := new(syncBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(time.Minute)
	for !strings.Contains(out.String(), listenLine) {
		select {
		case err := <-done:
			t.Fatalf("exited (%v) before it listened:\n%s", err, out)
		case <-deadline:
			cmd.Process.Kill()
			<-done
			t.Fatalf("did not listen in a minute:\n%s", out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGQUIT)
	var err error
	select {
	case err = <-done:
	case <-deadline:
		cmd.Process.Kill()
		<-done
		t.Fatalf("SIGQUIT did not end it:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("ended with %v, want exit status 2", err)
	}
	for _, want := range []string{
		`softrdma: SIGQUIT \(SOFTRDMA_DEBUG\): pid \d+, goroutines:`,
		`(?m)^goroutine \d+ \[`,
		`softrdma: sr_roce0: context: \d+ QPs`,
		`(?m)^qp 0x000001 GSI RTS dest`, // the CM's QP1
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
