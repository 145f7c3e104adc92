package decode

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer written by the command's goroutine and read
// by the test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCommandStdinStream: softrdma decode - reading a stream that is still
// coming (tcpdump -U -w - | softrdma decode -) prints each packet's line once
// its bytes have come, while the stream stays open, not only at its end; the
// summary follows the end as for a file.
func TestCommandStdinStream(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(captureDir, "rxe-rc-pingpong.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() { done <- Command("-", pr, CommandOptions{Flows: true}, &stdout, &stderr) }()

	// The first half of the capture; the command then waits for the rest.
	half := len(b) / 2
	if _, err := pw.Write(b[:half]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "RoCEv2") {
		select {
		case code := <-done:
			t.Fatalf("the command ended (exit %d) before the stream did", code)
		default:
		}
		if time.Now().After(deadline) {
			got := stdout.String()
			pw.Close()
			<-done
			t.Fatalf("no packet line while the stream stays open (stdout %q)", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if strings.Contains(stdout.String(), "Flows:") {
		t.Errorf("the summary came before the end of the stream:\n%s", stdout.String())
	}
	if _, err := pw.Write(b[half:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The same output as the file gives.
	var want, wantErr bytes.Buffer
	if code := Command("-", bytes.NewReader(b), CommandOptions{Flows: true}, &want, &wantErr); code != 0 {
		t.Fatalf("from memory: exit %d: %s", code, wantErr.String())
	}
	if stdout.String() != want.String() {
		t.Errorf("streamed output differs from the file's:\n%s\nwant\n%s", stdout.String(), want.String())
	}
}
