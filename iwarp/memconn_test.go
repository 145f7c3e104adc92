package iwarp

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// memPeer is the fuzzer's end of FuzzConnReceive's connection, in memory: the
// target's net.Conn reads the MPA Request and then the fuzzed octets from it,
// and its writes are counted and dropped. It plays what the loopback TCP peer
// (tcpPair, fuzzTarget.runTCP) does, in the same order, without a socket, a
// handshake or a goroutine: an input costs microseconds instead of a TCP
// connection's half millisecond, and Go's minimizer, which runs the target up
// to n²/2 times for an n-octet input, ends in seconds instead of taking the
// whole -fuzztime.
//
// The order: the Request is readable at once; the data only once the target
// has written its whole MPA Reply (gateAfterReply, peer-to-peer mode, where
// the RTR is in the data) or the first octet after it (its Read Request: the
// READ is outstanding then), or has closed its side; after the data the
// target reads EOF (the peer's FIN). Deadlines interrupt a blocked Read, as
// the reader's placement interrupt and the linger need.
type memPeer struct {
	mu      sync.Mutex
	cond    sync.Cond
	in      []byte // the Request, then the data
	reqLen  int    // octets of in readable before the gate opens
	pos     int
	gate    bool // the data is readable
	p2p     bool // the gate opens after the Reply, not after the octet that follows it
	written []byte
	replyN  int // the Reply's length, once its header is written; 0 before
	closed  bool
	wclosed bool
	rdl     time.Time
	timer   *time.Timer
}

// newMemPeer returns the target's end of a connection whose peer sends req,
// then data and FIN.
func newMemPeer(req, data []byte, p2p bool) *memPeer {
	c := &memPeer{in: append(append(make([]byte, 0, len(req)+len(data)), req...), data...), reqLen: len(req), p2p: p2p}
	c.cond.L = &c.mu
	return c
}

// memAddr is the address of both ends.
type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

func (c *memPeer) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.closed:
			return 0, net.ErrClosed
		case !c.rdl.IsZero() && !time.Now().Before(c.rdl):
			return 0, os.ErrDeadlineExceeded
		}
		end := c.reqLen
		if c.gate {
			end = len(c.in)
		}
		if c.pos < end {
			n := copy(p, c.in[c.pos:end])
			c.pos += n
			return n, nil
		}
		if c.gate {
			return 0, io.EOF
		}
		c.cond.Wait()
	}
}

func (c *memPeer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.wclosed {
		return 0, syscall.EPIPE
	}
	if !c.gate {
		c.written = append(c.written, p...)
		if c.replyN == 0 && len(c.written) >= MPAFrameHeaderLen {
			c.replyN = MPAFrameHeaderLen + int(binary.BigEndian.Uint16(c.written[18:20]))
		}
		if c.replyN > 0 && (len(c.written) > c.replyN || c.p2p && len(c.written) >= c.replyN) {
			c.openGate()
		}
	}
	return len(p), nil
}

// openGate makes the data readable; with c.mu held.
func (c *memPeer) openGate() {
	c.gate = true
	c.written = nil
	c.cond.Broadcast()
}

// CloseWrite is the target's FIN: the peer stops waiting for it to write.
func (c *memPeer) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wclosed = true
	c.openGate()
	return nil
}

func (c *memPeer) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.openGate()
	return nil
}

func (c *memPeer) LocalAddr() net.Addr  { return memAddr{} }
func (c *memPeer) RemoteAddr() net.Addr { return memAddr{} }

func (c *memPeer) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline wakes a blocked Read when t passes.
func (c *memPeer) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if !t.IsZero() {
		c.timer = time.AfterFunc(time.Until(t), func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
	}
	c.cond.Broadcast()
	return nil
}

// SetWriteDeadline does nothing: writes never block.
func (c *memPeer) SetWriteDeadline(time.Time) error { return nil }
