//go:build linux

package netio

import (
	"bytes"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestUDPSharedReads: an endpoint opened with SharedReads keeps its receiving
// socket out of Go's poller (a thread outside Go waits on it); once its reads
// are lent (LendReads) the blocking reader leaves the datagrams to
// TryReadDatagrams, takes them again when the lender says it no longer polls
// (and the two read into buffers of their own), and Close ends its wait.
func TestUDPSharedReads(t *testing.T) {
	SharedReads.Store(true)
	a, b, macA, _ := udpPair(t, udpCase{name: "shared"})
	SharedReads.Store(false)
	if b.shared == nil || a.shared == nil {
		t.Fatal("endpoints opened with SharedReads do not share their reads")
	}
	send := func(n int) {
		t.Helper()
		f := ipFrame{dstMAC: macA, srcMAC: macA, src: a.LocalAddr(), dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF,
			payload: roceLikePayload(n, 100)}.build()
		if _, err := a.Write([][]byte{f}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if polled := pollerFDs(t); polled[fdOf(t, b.rx.conn)] {
		t.Errorf("receiving socket (fd %d) is in Go's poller (watched: %v)", fdOf(t, b.rx.conn), polled)
	}

	var polling atomic.Bool
	polling.Store(true)
	sock, ok := b.LendReads(polling.Load)
	if !ok || sock != fdOf(t, b.rx.conn) {
		t.Fatalf("LendReads: socket %d, %v; want %d, true", sock, ok, fdOf(t, b.rx.conn))
	}
	type result struct {
		n   int
		err error
		pay []byte
	}
	got := make(chan result, 1)
	go func() {
		d := make([]Datagram, 4)
		n, err := b.ReadDatagrams(d)
		var p []byte
		if n > 0 {
			p = append(p, d[0].Payload...)
		}
		got <- result{n, err, p}
	}()
	// Lent: the datagram waits for TryReadDatagrams, the reader leaves it.
	send(1)
	d := make([]Datagram, 4)
	n := 0
	for n == 0 {
		var err error
		if n, err = b.TryReadDatagrams(d); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			t.Fatalf("the reader read with its reads lent: %d datagrams, %v", r.n, r.err)
		default:
		}
	}
	if n != 1 || !bytes.Equal(d[0].Payload, roceLikePayload(1, 100)) {
		t.Fatalf("TryReadDatagrams: %d datagrams", n)
	}
	// No longer polling: the reader takes the reads back and gets the next.
	polling.Store(false)
	send(2)
	r := <-got
	if r.err != nil || r.n != 1 || !bytes.Equal(r.pay, roceLikePayload(2, 100)) {
		t.Fatalf("reader after the lender stopped: %d datagrams, %v", r.n, r.err)
	}
	if b.ReadsLent() {
		t.Error("reads still lent after the lender stopped polling")
	}
	// The reader's batch stays intact while TryReadDatagrams reads: their
	// datagrams land in buffers of their own.
	send(3)
	held := make([]Datagram, 4)
	if n, err := b.ReadDatagrams(held); err != nil || n != 1 {
		t.Fatalf("ReadDatagrams: %d, %v", n, err)
	}
	send(4)
	for n = 0; n == 0; {
		var err error
		if n, err = b.TryReadDatagrams(d); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(d[0].Payload, roceLikePayload(4, 100)) {
		t.Fatal("TryReadDatagrams: not the fourth datagram")
	}
	if !bytes.Equal(held[0].Payload, roceLikePayload(3, 100)) {
		t.Fatal("the reader's datagram was overwritten by TryReadDatagrams's")
	}
	// Close ends a reader's wait.
	go func() {
		n, err := b.ReadDatagrams(make([]Datagram, 4))
		got <- result{n: n, err: err}
	}()
	time.Sleep(10 * time.Millisecond) // let it wait (the test passes either way)
	b.Close()
	if r := <-got; !errors.Is(r.err, net.ErrClosed) {
		t.Fatalf("ReadDatagrams after Close: %d, %v; want net.ErrClosed", r.n, r.err)
	}
}
