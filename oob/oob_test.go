package oob

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func TestErrorText(t *testing.T) {
	for _, tt := range []struct {
		e    *Error
		want string
	}{
		{&Error{Message: "perftest keys", Field: "qpn", Value: `"10000000"`, Reason: "not 6 hex digits", Err: ErrSyntax}, `perftest keys: qpn "10000000" not 6 hex digits`},
		{&Error{Message: "pingpong dest", Field: "length", Value: "40", Reason: "want 52", Err: ErrTruncated}, "pingpong dest: length 40 want 52"},
		{&Error{Message: "perftest done", Err: ErrUnexpected}, "perftest done: unexpected message"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.e, tt.e.Err) {
			t.Errorf("%v is not its sentinel", tt.e)
		}
		var e *Error
		if !errors.As(error(tt.e), &e) {
			t.Error("errors.As")
		}
	}
}

func TestGuard(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()

	// Deadline: the blocked read returns with DeadlineExceeded.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	release := GuardRead(ctx, a)
	_, err := a.Read(make([]byte, 1))
	err = release(err)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}

	// Cancel: the blocked write returns with Canceled.
	ctx, cancel = context.WithCancel(context.Background())
	release = Guard(ctx, a)
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = a.Write([]byte{1})
	if err = release(err); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}

	// Success leaves no deadline behind.
	c, d := net.Pipe()
	defer c.Close()
	defer d.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	release = GuardWrite(ctx, c)
	go d.Read(make([]byte, 1))
	_, err = c.Write([]byte{1})
	if err = release(err); err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(30 * time.Millisecond)
	go d.Read(make([]byte, 1))
	if _, err := c.Write([]byte{2}); err != nil {
		t.Fatalf("deadline left behind: %v", err)
	}
}
