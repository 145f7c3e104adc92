package pingpong

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/oob"
	"github.com/softrdma/softrdma/oob/internal/capture"
)

const captures = "../../testdata/captures"

// logLine matches the tools' address lines; ibv_ud_pingpong prints "PSN 0x...: GID" for
// the local address.
var logLine = regexp.MustCompile(`(local|remote) address:\s+LID 0x([0-9a-f]+), QPN 0x([0-9a-f]+), PSN 0x([0-9a-f]+)[,:] GID (\S+)`)

// logDests returns the client's and the server's Dest as the client printed them, and
// checks that the server printed the same.
func logDests(t *testing.T, name string) (client, server Dest) {
	t.Helper()
	clientLog, serverLog, err := capture.Log(captures, name)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(section string) (local, remote Dest) {
		m := logLine.FindAllStringSubmatch(section, -1)
		if len(m) != 2 {
			t.Fatalf("%s.log: %d address lines in a section, want 2", name, len(m))
		}
		for _, l := range m {
			var d Dest
			v, _ := strconv.ParseUint(l[2], 16, 16)
			d.LID = uint16(v)
			v, _ = strconv.ParseUint(l[3], 16, 32)
			d.QPN = uint32(v)
			v, _ = strconv.ParseUint(l[4], 16, 32)
			d.PSN = uint32(v)
			d.GID = netip.MustParseAddr(l[5]).As16()
			if l[1] == "local" {
				local = d
			} else {
				remote = d
			}
		}
		return
	}
	cl, cr := parse(clientLog)
	sl, sr := parse(serverLog)
	if cl != sr || cr != sl {
		t.Fatalf("%s.log: client and server logs disagree: %v/%v vs %v/%v", name, cl, cr, sl, sr)
	}
	return cl, cr
}

var captureNames = []string{"rxe-rc-pingpong", "rxe-rc-pingpong-ipv6", "rxe-ud-pingpong"}

func loadConn(t *testing.T, name string) *capture.Conn {
	t.Helper()
	conns, err := capture.TCP(filepath.Join(captures, name+".pcap"), DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 1 {
		t.Fatalf("%s: %d connections to %d, want 1", name, len(conns), DefaultPort)
	}
	return conns[0]
}

// TestCaptures parses the whole exchange of each capture, checks it against the log and
// re-marshals it byte for byte.
func TestCaptures(t *testing.T) {
	for _, name := range captureNames {
		t.Run(name, func(t *testing.T) {
			c := loadConn(t, name)
			wantClient, wantServer := logDests(t, name)

			// The order on the wire: client message, server message, client "done".
			var kinds []string
			for _, e := range c.Events {
				kinds = append(kinds, map[bool]string{true: "C", false: "S"}[e.FromClient]+strconv.Itoa(len(e.Data)))
			}
			if got := strings.Join(kinds, " "); got != "C52 S52 C5" {
				t.Fatalf("segments %q, want \"C52 S52 C5\"", got)
			}
			for i, want := range []Dest{wantClient, wantServer} {
				msg := c.Events[i].Data
				var d Dest
				if err := d.UnmarshalBinary(msg); err != nil {
					t.Fatal(err)
				}
				if d != want {
					t.Errorf("frame %d: got %v, log says %v", c.Events[i].Frame, d, want)
				}
				again, err := d.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again, msg) {
					t.Errorf("frame %d: re-marshalled\n%q\nwant\n%q", c.Events[i].Frame, again, msg)
				}
			}
			if string(c.Events[2].Data) != Done {
				t.Errorf("last message %q, want %q", c.Events[2].Data, Done)
			}
		})
	}
}

// TestReplay runs Client and Server against the captured other side and compares every
// byte they write with what the real tool wrote, in order.
func TestReplay(t *testing.T) {
	for _, name := range captureNames {
		c := loadConn(t, name)
		cl, sv := logDests(t, name)
		t.Run(name+"/client", func(t *testing.T) {
			ours, theirs := net.Pipe()
			defer ours.Close()
			errc := make(chan error, 1)
			go func() {
				defer theirs.Close()
				errc <- capture.Play(capture.StreamPeer{RW: theirs}, c.Events, false, nil)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rem, err := Client(ctx, ours, cl)
			if err != nil {
				t.Fatal(err)
			}
			if rem != sv {
				t.Errorf("remote %v, want %v", rem, sv)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
		t.Run(name+"/server", func(t *testing.T) {
			ours, theirs := net.Pipe()
			defer ours.Close()
			errc := make(chan error, 1)
			go func() {
				defer theirs.Close()
				errc <- capture.Play(capture.StreamPeer{RW: theirs}, c.Events, true, nil)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var connected []Dest
			rem, err := Server(ctx, ours, sv, func(_ context.Context, r Dest) error {
				connected = append(connected, r)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if rem != cl || len(connected) != 1 || connected[0] != cl {
				t.Errorf("remote %v, connect saw %v, want %v", rem, connected, cl)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func testDests(n int, base uint32) []Dest {
	ds := make([]Dest, n)
	for i := range ds {
		ds[i] = Dest{LID: uint16(base), QPN: base + uint32(i), PSN: (base * 7919 * uint32(i+1)) & 0xffffff,
			GID: netip.MustParseAddr("fe80::5054:ff:fe77:1").As16()}
		ds[i].GID[15] = byte(i)
	}
	return ds
}

// TestRoundTrip runs ClientN against ServerN over net.Pipe and loopback TCP, with the
// server's connect callback seeing the client's Dests before it answers.
func TestRoundTrip(t *testing.T) {
	pipes := map[string]func(t *testing.T) (net.Conn, net.Conn){
		"pipe": func(*testing.T) (net.Conn, net.Conn) { return net.Pipe() },
		"tcp":  func(t *testing.T) (net.Conn, net.Conn) { return tcploop.Pair(t, "tcp") },
	}
	for pname, mk := range pipes {
		for _, n := range []int{1, 16} {
			t.Run(pname+"/"+strconv.Itoa(n), func(t *testing.T) {
				cc, sc := mk(t)
				defer cc.Close()
				defer sc.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				cl, sv := testDests(n, 0x11), testDests(n, 0x300)
				var (
					wg              sync.WaitGroup
					srvRem, connRem []Dest
					srvErr          error
				)
				wg.Add(1)
				go func() {
					defer wg.Done()
					srvRem, srvErr = ServerN(ctx, sc, sv, func(_ context.Context, r []Dest) error {
						connRem = r
						return nil
					})
				}()
				cliRem, err := ClientN(ctx, cc, cl)
				wg.Wait()
				if err != nil || srvErr != nil {
					t.Fatal(err, srvErr)
				}
				for i := range n {
					if cliRem[i] != sv[i] || srvRem[i] != cl[i] || connRem[i] != cl[i] {
						t.Fatalf("QP %d: client got %v, server got %v (connect %v)", i, cliRem[i], srvRem[i], connRem[i])
					}
				}
			})
		}
	}
}

func TestUnmarshalErrors(t *testing.T) {
	good := []byte("0000:000011:2bbfb2:00000000000000000000ffff0a4d0015\x00")
	mod := func(off int, s string) []byte {
		b := bytes.Clone(good)
		copy(b[off:], s)
		return b
	}
	tests := []struct {
		name  string
		in    []byte
		want  error
		field string
	}{
		{"empty", nil, oob.ErrTruncated, "length"},
		{"short", good[:51], oob.ErrTruncated, "length"},
		{"long", append(bytes.Clone(good), 0), oob.ErrSyntax, "length"},
		{"done", []byte(Done), oob.ErrTruncated, "length"},
		{"separator 1", mod(4, "-"), oob.ErrSyntax, "separator"},
		{"separator 2", mod(11, " "), oob.ErrSyntax, "separator"},
		{"separator 3", mod(18, "0"), oob.ErrSyntax, "separator"},
		{"no NUL", mod(51, "0"), oob.ErrSyntax, "terminator"},
		{"lid", mod(0, "00g0"), oob.ErrSyntax, "lid"},
		{"qpn", mod(5, "0x0011"), oob.ErrSyntax, "qpn"},
		{"psn", mod(12, "2bbfb "), oob.ErrSyntax, "psn"},
		{"gid", mod(19, "::"), oob.ErrSyntax, "gid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Dest
			err := d.UnmarshalBinary(tt.in)
			var e *oob.Error
			if !errors.Is(err, tt.want) || !errors.As(err, &e) || e.Field != tt.field {
				t.Fatalf("got %v, want %v in field %q", err, tt.want, tt.field)
			}
			if !strings.HasPrefix(err.Error(), "pingpong dest: "+tt.field) {
				t.Errorf("error text %q does not name the field", err)
			}
		})
	}
	// Upper-case hex is accepted (strtol does) and normalised.
	var d Dest
	if err := d.UnmarshalBinary(mod(12, "2BBFB2")); err != nil || d.PSN != 0x2bbfb2 {
		t.Errorf("upper case: %v %v", d, err)
	}
}

func TestMarshalRange(t *testing.T) {
	for _, d := range []Dest{{QPN: 1 << 24}, {PSN: 1 << 24}} {
		if _, err := d.MarshalBinary(); !errors.Is(err, oob.ErrRange) {
			t.Errorf("%v: got %v, want ErrRange", d, err)
		}
	}
	d := Dest{LID: 0xffff, QPN: 0xffffff, PSN: 0xffffff}
	for i := range d.GID {
		d.GID[i] = 0xff
	}
	b, err := d.MarshalBinary()
	if err != nil || len(b) != MessageSize {
		t.Fatal(b, err)
	}
	var back Dest
	if err := back.UnmarshalBinary(b); err != nil || back != d {
		t.Fatal(back, err)
	}
}

// TestBitFlips flips every bit of a captured message: a flipped message either fails to
// decode or decodes to a Dest whose message decodes to the same Dest.
func TestBitFlips(t *testing.T) {
	msg := loadConn(t, "rxe-rc-pingpong").Events[0].Data
	for i := range msg {
		for bit := range 8 {
			b := bytes.Clone(msg)
			b[i] ^= 1 << bit
			var d Dest
			if err := d.UnmarshalBinary(b); err != nil {
				var e *oob.Error
				if !errors.As(err, &e) {
					t.Fatalf("byte %d bit %d: untyped error %v", i, bit, err)
				}
				continue
			}
			again, err := d.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.EqualFold(again, b) {
				t.Errorf("byte %d bit %d: %q decoded as %v, re-encoded %q", i, bit, b, d, again)
			}
		}
	}
}

func TestUnmarshalAllocs(t *testing.T) {
	msg := loadConn(t, "rxe-ud-pingpong").Events[0].Data
	var d Dest
	if n := testing.AllocsPerRun(100, func() { _ = d.UnmarshalBinary(msg) }); n != 0 {
		t.Errorf("UnmarshalBinary allocates %v times", n)
	}
	buf := make([]byte, 0, MessageSize)
	if n := testing.AllocsPerRun(100, func() { _, _ = d.AppendBinary(buf) }); n != 0 {
		t.Errorf("AppendBinary allocates %v times", n)
	}
}

// TestContext: a silent peer makes the exchange end with ctx's error, by deadline or by
// cancellation.
func TestContext(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := Server(ctx, a, Dest{}, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := Client(ctx, a, Dest{}) // nobody reads: the write blocks
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want Canceled", err)
		}
	})
}

// TestServerFailures: the server's connect error aborts before it answers (the client
// sees the connection close), and anything but "done" at the end is refused.
func TestServerFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("connect", func(t *testing.T) {
		a, b := net.Pipe()
		boom := errors.New("boom")
		go func() {
			_, err := Server(ctx, a, Dest{}, func(context.Context, Dest) error { return boom })
			if !errors.Is(err, boom) {
				t.Errorf("server: got %v, want boom", err)
			}
			a.Close()
		}()
		if _, err := Client(ctx, b, Dest{}); err == nil {
			t.Error("client succeeded against a failing server")
		}
		b.Close()
	})
	t.Run("not done", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() {
			msg, _ := (&Dest{QPN: 1}).MarshalBinary()
			b.Write(msg)
			b.Read(make([]byte, MessageSize))
			b.Write([]byte("bye!\x00"))
		}()
		_, err := Server(ctx, a, Dest{}, nil)
		if !errors.Is(err, oob.ErrUnexpected) {
			t.Fatalf("got %v, want ErrUnexpected", err)
		}
	})
}

func FuzzDestUnmarshal(f *testing.F) {
	for _, name := range captureNames {
		conns, err := capture.TCP(filepath.Join(captures, name+".pcap"), DefaultPort)
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range conns[0].Events {
			f.Add(e.Data)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Dest
		if err := d.UnmarshalBinary(b); err != nil {
			var e *oob.Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		enc, err := d.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var d2 Dest
		if err := d2.UnmarshalBinary(enc); err != nil || d2 != d {
			t.Fatalf("decode-encode-decode unstable: %v %v %v", d, d2, err)
		}
		if !bytes.EqualFold(enc, b) {
			t.Fatalf("decoded %q, re-encoded %q", b, enc)
		}
	})
}
