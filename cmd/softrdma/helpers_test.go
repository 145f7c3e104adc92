package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/internal/rpingtext"
)

// untilListening runs client, a client command started beside its server,
// again while it fails with one of notYet in its stderr (the server does not
// listen yet: a REJ, a refused connection), pause between tries, 50 tries at
// most. It returns the last try's exit code, stdout and stderr.
func untilListening(pause time.Duration, notYet []string, client func(stdout, stderr io.Writer) int) (code int, stdout, stderr *bytes.Buffer) {
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	for try := 0; try < 50; try++ {
		stdout.Reset()
		stderr.Reset()
		if code = client(stdout, stderr); code == 0 || !containsAny(stderr.String(), notYet) {
			break
		}
		time.Sleep(pause)
	}
	return code, stdout, stderr
}

// containsAny says whether s contains one of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// decodeFile runs softrdma decode with opts over the capture file path and
// returns its result and output; a file it cannot open or read fails the test.
func decodeFile(t *testing.T, path string, opts decode.Options) (decode.Result, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	res, err := decode.Run(f, &out, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

// checkRpingLines checks that an rping -v client printed client and its
// server server: rping.c's lines for count pings of size octets, nothing more.
func checkRpingLines(t *testing.T, client, server string, count, size int) {
	t.Helper()
	if want := rpingtext.Lines("ping data: ", count, size); client != want {
		t.Errorf("client printed\n%s\nwant\n%s", client, want)
	}
	if want := rpingtext.Lines("server ping data: ", count, size); server != want {
		t.Errorf("server printed\n%s\nwant\n%s", server, want)
	}
}
