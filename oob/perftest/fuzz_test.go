package perftest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/softrdma/softrdma/oob"
)

// seedMessages adds every captured message to f.
func seedMessages(f *testing.F, keep func(m wireMsg) bool, add func(m wireMsg)) {
	for _, c := range capCases {
		for _, m := range loadCapture(f, c).msgs {
			if keep(m) {
				add(m)
			}
		}
	}
}

func typed(t *testing.T, err error) {
	t.Helper()
	var e *oob.Error
	if !errors.As(err, &e) {
		t.Fatalf("untyped error %v", err)
	}
}

func FuzzKeys(f *testing.F) {
	seedMessages(f, func(m wireMsg) bool { return m.step.Kind == StepHandShake && len(m.data) != DestBinarySize },
		func(m wireMsg) { f.Add(m.data, true); f.Add(m.data[:KeysSize], false) })
	f.Fuzz(func(t *testing.T, b []byte, withGID bool) {
		var d Dest
		if err := d.UnmarshalKeys(b, withGID); err != nil {
			typed(t, err)
			return
		}
		enc, err := d.AppendKeys(nil, withGID)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.EqualFold(enc, b) {
			t.Fatalf("%q decoded and re-encoded as %q", b, enc)
		}
		var d2 Dest
		if err := d2.UnmarshalKeys(enc, withGID); err != nil || d2 != d {
			t.Fatalf("unstable: %v %v %v", d, d2, err)
		}
	})
}

func FuzzDestBinary(f *testing.F) {
	seedMessages(f, func(m wireMsg) bool { return len(m.data) == DestBinarySize }, func(m wireMsg) { f.Add(m.data) })
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Dest
		if err := d.UnmarshalBinary(b); err != nil {
			typed(t, err)
			return
		}
		enc, _ := d.MarshalBinary()
		if !bytes.Equal(enc, b) {
			t.Fatalf("%x re-encoded as %x", b, enc)
		}
	})
}

// FuzzMessages decodes b as each fixed-size message type; whatever decodes re-encodes to
// b (the MTU up to the digit after a one-digit value, which perftest never looks at).
func FuzzMessages(f *testing.F) {
	seedMessages(f, func(m wireMsg) bool { return m.step.Kind != StepHandShake }, func(m wireMsg) { f.Add(m.data) })
	f.Add(make([]byte, ReportPerPortSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v Version
		if err := v.UnmarshalBinary(b); err == nil {
			if enc, _ := v.MarshalBinary(); !bytes.Equal(enc, b) {
				t.Fatalf("version %x -> %x", b, enc)
			}
			_ = v.Number()
			_ = v.String()
		} else {
			typed(t, err)
		}
		var s SysData
		if err := s.UnmarshalBinary(b); err == nil {
			if enc, _ := s.MarshalBinary(); !bytes.Equal(enc, b) {
				t.Fatalf("sys data %x -> %x", b, enc)
			}
		} else {
			typed(t, err)
		}
		var m MTU
		if err := m.UnmarshalBinary(b); err == nil {
			enc, err := m.MarshalBinary()
			if err != nil || !bytes.Equal(enc, b) {
				t.Fatalf("mtu %q -> %q %v", b, enc, err)
			}
			_ = m.Negotiate(MTU4096).Valid()
		} else {
			typed(t, err)
		}
		var r BWReport
		if err := r.UnmarshalBinary(b); err == nil {
			if enc, _ := r.MarshalBinary(); !bytes.Equal(enc, b) {
				t.Fatalf("report %x -> %x", b, enc)
			}
		} else {
			typed(t, err)
		}
	})
}

// byteConn is a net.Conn that reads from a buffer and discards writes.
type byteConn struct {
	r *bytes.Reader
}

func (c *byteConn) Read(p []byte) (int, error)          { return c.r.Read(p) }
func (c *byteConn) Write(p []byte) (int, error)         { return len(p), nil }
func (c *byteConn) Close() error                        { return nil }
func (c *byteConn) LocalAddr() net.Addr                 { return &net.TCPAddr{} }
func (c *byteConn) RemoteAddr() net.Addr                { return &net.TCPAddr{} }
func (c *byteConn) SetDeadline(time.Time) error         { return nil }
func (c *byteConn) SetReadDeadline(time.Time) error     { return nil }
func (c *byteConn) SetWriteDeadline(time.Time) error    { return nil }
func (c *byteConn) String() string                      { return "byteConn" }
func (c *byteConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }

// FuzzServerStream feeds arbitrary client bytes to a server: it must finish or fail,
// never panic, and a failure names its step.
func FuzzServerStream(f *testing.F) {
	for _, c := range capCases[:7] { // the TCP captures
		cp := loadCapture(f, c)
		var client []byte
		for _, e := range cp.events {
			if e.FromClient {
				client = append(client, e.Data...)
			}
		}
		f.Add(client, uint8(c.cfg.Test))
	}
	f.Fuzz(func(t *testing.T, b []byte, test uint8) {
		cfg := Config{Test: Test(test%8 + 1), WithGID: test&0x10 != 0, MTU: MTU1024, Duplex: test&0x20 != 0 && Test(test%8+1).Bandwidth()}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := RunServer(ctx, &byteConn{r: bytes.NewReader(b)}, cfg, Hooks{})
		if err != nil {
			var se *StepError
			if !errors.As(err, &se) {
				t.Fatalf("error without step: %v", err)
			}
			if res == nil || res.Steps != se.Index {
				t.Fatalf("result steps %v at step %d", res, se.Index)
			}
		}
	})
}
