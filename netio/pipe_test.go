package netio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// testFrame returns a frame of n bytes whose contents identify seq.
func testFrame(seq, n int) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(seq*7 + i)
	}
	return f
}

func makeBufs(count, size int) ([][]byte, []int) {
	bufs := make([][]byte, count)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, count)
}

func TestPipeRoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		frames    int
		size      int
		wOffset   int
		rOffset   int
		readBatch int
	}{
		{"single", 1, 60, 0, 0, 1},
		{"batch", 8, 100, 0, 0, 8},
		{"headroom both sides", 5, 1514, 16, 32, 8},
		{"read batch smaller", 10, 64, 0, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := NewPipe(8, DefaultMTU)
			var wbufs [][]byte
			for i := 0; i < tt.frames; i++ {
				wbufs = append(wbufs, append(make([]byte, tt.wOffset), testFrame(i, tt.size)...))
			}
			n, err := a.Write(wbufs, tt.wOffset)
			if err != nil || n != tt.frames {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, tt.frames)
			}
			got := 0
			for got < tt.frames {
				bufs, sizes := makeBufs(tt.readBatch, tt.rOffset+tt.size)
				n, err := b.TryRead(bufs, sizes, tt.rOffset)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					t.Fatalf("TryRead returned 0 after %d of %d frames", got, tt.frames)
				}
				for i := 0; i < n; i++ {
					want := testFrame(got, tt.size)
					if sizes[i] != tt.size || !bytes.Equal(bufs[i][tt.rOffset:tt.rOffset+sizes[i]], want) {
						t.Fatalf("frame %d: got %d bytes %x..., want %x...", got, sizes[i], bufs[i][tt.rOffset:][:4], want[:4])
					}
					got++
				}
			}
			ebufs, esizes := makeBufs(1, 2000)
			if n, err := b.TryRead(ebufs, esizes, 0); n != 0 || err != nil {
				t.Fatalf("TryRead on empty = %d, %v; want 0, nil", n, err)
			}
			if s := a.Stats(); s.Sent != uint64(tt.frames) {
				t.Fatalf("a.Sent = %d, want %d", s.Sent, tt.frames)
			}
			if s := b.Stats(); s.Received != uint64(tt.frames) {
				t.Fatalf("b.Received = %d, want %d", s.Received, tt.frames)
			}
		})
	}
}

func TestPipeBothDirectionsIndependent(t *testing.T) {
	a, b := NewPipe(4, DefaultMTU)
	a.Write([][]byte{[]byte("a->b")}, 0)
	b.Write([][]byte{[]byte("b->a")}, 0)
	for _, tc := range []struct {
		end  *PipeEnd
		want string
	}{{a, "b->a"}, {b, "a->b"}} {
		bufs, sizes := makeBufs(4, 100)
		n, err := tc.end.TryRead(bufs, sizes, 0)
		if err != nil || n != 1 || string(bufs[0][:sizes[0]]) != tc.want {
			t.Fatalf("read %d, %v, %q; want 1 frame %q", n, err, bufs[0][:sizes[0]], tc.want)
		}
	}
}

func TestPipeCopiesOnWrite(t *testing.T) {
	a, b := NewPipe(1, DefaultMTU)
	buf := []byte("original")
	a.Write([][]byte{buf}, 0)
	copy(buf, "CHANGED!")
	bufs, sizes := makeBufs(1, 100)
	if _, err := b.Read(bufs, sizes, 0); err != nil {
		t.Fatal(err)
	}
	if got := string(bufs[0][:sizes[0]]); got != "original" {
		t.Fatalf("receiver saw %q after the sender reused its buffer; want %q", got, "original")
	}
}

func TestPipeDrops(t *testing.T) {
	tests := []struct {
		name     string
		queue    int
		mtu      int
		sizes    []int
		wantSent uint64
		wantFull uint64
		wantOver uint64
	}{
		{"queue overflow", 3, 1500, []int{60, 60, 60, 60, 60}, 3, 2, 0},
		{"oversize", 10, 100, []int{114, 115, 60}, 2, 0, 1},
		{"both", 2, 100, []int{200, 60, 60, 60}, 2, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := NewPipeQueue(8, tt.mtu, tt.queue)
			var bufs [][]byte
			for i, s := range tt.sizes {
				bufs = append(bufs, testFrame(i, s))
			}
			n, err := a.Write(bufs, 0)
			if err != nil || n != len(bufs) {
				t.Fatalf("Write = %d, %v; drops must not be errors", n, err)
			}
			s := a.Stats()
			if s.Sent != tt.wantSent || s.DroppedFull != tt.wantFull || s.DroppedOversize != tt.wantOver {
				t.Fatalf("stats %+v; want sent %d full %d oversize %d", s, tt.wantSent, tt.wantFull, tt.wantOver)
			}
			if q := b.Queued(); q != int(tt.wantSent) {
				t.Fatalf("b.Queued() = %d, want %d", q, tt.wantSent)
			}
		})
	}
}

func TestPipeShortBuffer(t *testing.T) {
	a, b := NewPipe(4, DefaultMTU)
	a.Write([][]byte{testFrame(0, 50), testFrame(1, 200), testFrame(2, 50)}, 0)
	bufs, sizes := makeBufs(4, 100)
	n, err := b.TryRead(bufs, sizes, 0)
	if n != 1 || !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("TryRead = %d, %v; want 1 frame and ErrShortBuffer", n, err)
	}
	n, err = b.TryRead(bufs, sizes, 0)
	if n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], testFrame(2, 50)) {
		t.Fatalf("after the short buffer: %d, %v; want frame 2", n, err)
	}
	if s := b.Stats(); s.DroppedShortBuffer != 1 || s.Received != 2 {
		t.Fatalf("stats %+v; want 1 short-buffer drop and 2 received", s)
	}
}

func TestPipeWriteBadOffset(t *testing.T) {
	a, _ := NewPipe(4, DefaultMTU)
	n, err := a.Write([][]byte{make([]byte, 20), make([]byte, 5)}, 10)
	if n != 1 || err == nil {
		t.Fatalf("Write = %d, %v; want 1 and an error for the second buffer", n, err)
	}
}

func TestPipeClose(t *testing.T) {
	a, b := NewPipe(4, DefaultMTU)
	a.Write([][]byte{testFrame(0, 60)}, 0)
	a.Close()
	a.Close() // idempotent
	bufs, sizes := makeBufs(4, 100)
	if _, err := a.Read(bufs, sizes, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on closed end: %v, want net.ErrClosed", err)
	}
	if _, err := a.TryRead(bufs, sizes, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("TryRead on closed end: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write(bufs, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write on closed end: %v, want net.ErrClosed", err)
	}
	// The peer drains what was queued, then sees EOF.
	if n, err := b.Read(bufs, sizes, 0); n != 1 || err != nil {
		t.Fatalf("peer Read = %d, %v; want the queued frame", n, err)
	}
	if _, err := b.Read(bufs, sizes, 0); err != io.EOF {
		t.Fatalf("peer Read after drain: %v, want io.EOF", err)
	}
	b.Write([][]byte{testFrame(1, 60)}, 0)
	if s := b.Stats(); s.DroppedPeerClosed != 1 {
		t.Fatalf("write to closed peer: stats %+v, want DroppedPeerClosed 1", s)
	}
}

func TestPipeCloseUnblocksRead(t *testing.T) {
	for _, closeSelf := range []bool{true, false} {
		t.Run(fmt.Sprintf("closeSelf=%v", closeSelf), func(t *testing.T) {
			a, b := NewPipe(4, DefaultMTU)
			done := make(chan error)
			go func() {
				bufs, sizes := makeBufs(1, 100)
				_, err := b.Read(bufs, sizes, 0)
				done <- err
			}()
			if closeSelf {
				b.Close()
			} else {
				a.Close()
			}
			err := <-done
			want := io.EOF
			if closeSelf {
				want = net.ErrClosed
			}
			if !errors.Is(err, want) {
				t.Fatalf("blocked Read returned %v, want %v", err, want)
			}
		})
	}
}

// TestPipeConcurrent streams frames through the pipe from one goroutine to
// another with blocking Reads; run with -race.
func TestPipeConcurrent(t *testing.T) {
	const total = 5000
	a, b := NewPipeQueue(16, DefaultMTU, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; {
			// Back off when the queue is full so that nothing is dropped.
			if b.Queued() > 48 {
				time.Sleep(10 * time.Microsecond)
				continue
			}
			batch := [][]byte{testFrame(i, 64), testFrame(i+1, 64)}
			a.Write(batch, 0)
			i += 2
		}
	}()
	next := 0
	bufs, sizes := makeBufs(16, 100)
	for next < total {
		n, err := b.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if !bytes.Equal(bufs[i][:sizes[i]], testFrame(next, 64)) {
				t.Fatalf("frame %d out of order or corrupt", next)
			}
			next++
		}
	}
	wg.Wait()
	if s := a.Stats(); s.DroppedFull != 0 {
		t.Fatalf("unexpected drops: %+v", s)
	}
}

func TestPipeSteadyStateAllocs(t *testing.T) {
	a, b := NewPipeQueue(4, DefaultMTU, 8)
	w := [][]byte{testFrame(0, 1000), testFrame(1, 1000)}
	bufs, sizes := makeBufs(4, 1514)
	for i := 0; i < 8; i++ { // grow every ring slot once
		a.Write(w, 0)
		b.TryRead(bufs, sizes, 0)
	}
	allocs := testing.AllocsPerRun(100, func() {
		a.Write(w, 0)
		b.TryRead(bufs, sizes, 0)
	})
	if allocs != 0 {
		t.Fatalf("steady-state Write+TryRead allocates %v times, want 0", allocs)
	}
}
