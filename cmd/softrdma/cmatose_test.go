package main

import (
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"
)

// TestCmatoseLoopback runs softrdma cmatose server and client against each
// other over UDP on loopback, RC (ucmatose's exchange) and --ud (udaddy's):
// both exit 0 and print the tools' lines in their order.
func TestCmatoseLoopback(t *testing.T) {
	for _, c := range []struct {
		ud       bool
		srv, cli string
	}{
		{false,
			"cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			"cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"},
		{true,
			"udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n",
			"udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"},
	} {
		t.Run(strconv.FormatBool(c.ud), func(t *testing.T) {
			net3 := loopbackNet()
			srvIP, cliIP := net3+"1", net3+"2"
			port := strconv.Itoa(21000 + int(time.Now().UnixNano()%5000))
			extra := []string{"-p", port, "--timeout", "20s", "-C", "7", "-S", "300"}
			if c.ud {
				extra = append(extra, "--ud")
			}
			var sOut, sErr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- cmatoseCmd(append([]string{"-b", srvIP}, extra...), &sOut, &sErr) }()
			code, cOut, cErr := untilListening(100*time.Millisecond, []string{"REJECTED", "UNREACHABLE"}, func(stdout, stderr io.Writer) int {
				return cmatoseCmd(append([]string{"-s", srvIP, "-b", cliIP}, extra...), stdout, stderr)
			})
			if code != 0 || cOut.String() != c.cli {
				t.Errorf("client exit %d:\n%s%s\nwant\n%s", code, cOut.String(), cErr.String(), c.cli)
			}
			select {
			case code := <-done:
				if code != 0 || sOut.String() != c.srv {
					t.Errorf("server exit %d:\n%s%s\nwant\n%s", code, sOut.String(), sErr.String(), c.srv)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("server did not end")
			}
		})
	}
}
