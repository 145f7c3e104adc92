package decode

import (
	"bytes"
	"github.com/softrdma/softrdma/internal/syncbuf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lockedBuffer is a buffer the test reads while the command writes it.
type lockedBuffer = syncbuf.Buffer

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

// streamHelperEnv makes the test binary run softrdma decode - on its own
// standard input (TestCommandStdinInterrupt's child).
const streamHelperEnv = "SOFTRDMA_DECODE_STREAM_HELPER"

func init() {
	if os.Getenv(streamHelperEnv) == "1" {
		os.Exit(Command("-", os.Stdin, CommandOptions{Flows: true}, os.Stdout, os.Stderr))
	}
}

// TestCommandStdinInterrupt: a Ctrl-C of 'tcpdump -w - | softrdma decode -'
// reaches both; decode (this test binary as it, in a child process) outlives
// the first SIGINT, reads the stream to its end, which the writer then closes,
// and prints the summary, exit 0 (it died at the signal with nothing more).
func TestCommandStdinInterrupt(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(captureDir, "rxe-rc-pingpong.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), streamHelperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	half := len(b) / 2
	if _, err := stdin.Write(b[:half]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "RoCEv2") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// The writer ends the stream after the same Ctrl-C; a write to a child
	// that died fails, which the wait below reports.
	stdin.Write(b[half:])
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("decode - after a SIGINT: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "Flows:") {
		t.Errorf("no summary after the stream ended:\n%s", stdout.String())
	}
}
