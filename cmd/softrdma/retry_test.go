package main

import (
	"bytes"
	"io"
	"strings"
	"time"
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
