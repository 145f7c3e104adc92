package conform

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
)

// tcpControl serves the control protocol for the in-process peer's device on a
// loopback TCP port and returns a client connected to it.
func tcpControl(t *testing.T) (*Client, string) {
	t.Helper()
	s := newSelf(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go (&Server{Device: s.Device}).Serve(l)
	c, err := DialControl(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, l.Addr().String()
}

func TestControlOverTCP(t *testing.T) {
	c, _ := tcpControl(t)
	ctx := context.Background()
	h, err := c.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Protocol != ControlProtocol || h.Implementation != "softrdma" || h.Transport != "roce" || h.PathMTU != 1024 ||
		!h.Has(OpPostSend) || h.Has("format_disk") || len(h.Addrs) == 0 || (h.ByteOrder != "little" && h.ByteOrder != "big") {
		t.Errorf("hello %+v", h)
	}
	q, err := c.CreateQP(ctx, QPSpec{Type: "rc", RemoteIP: SelfTesterIP.String(), RemoteQPN: 0x123, RQPSN: 5, SQPSN: 9,
		Access: allRights, MinRNRTimer: 12, MaxDestRdAtomic: 2})
	if err != nil {
		t.Fatal(err)
	}
	if q.State != "RTS" || q.PathMTU != 1024 || q.PKey != 0xffff {
		t.Errorf("create_qp %+v", q)
	}
	mr, err := c.RegMR(ctx, MRSpec{Length: 256, Access: []string{AccessRemoteRead}, Fill: 0xab})
	if err != nil {
		t.Fatal(err)
	}
	if mr.Length != 256 || mr.RKey == 0 || mr.VA == 0 {
		t.Errorf("reg_mr %+v", mr)
	}
	if err := c.WriteMR(ctx, mr.MR, 10, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadMR(ctx, mr.MR, 8, 6)
	if err != nil || !bytes.Equal(got, []byte{0xab, 0xab, 1, 2, 3, 0xab}) {
		t.Errorf("read_mr = %x, %v", got, err)
	}
	if err := c.PostRecv(ctx, RecvSpec{QPN: q.QPN, MR: mr.MR, Length: 64, Count: 4}); err != nil {
		t.Fatal(err)
	}
	wcs, err := c.PollCQ(ctx, PollArgs{QPN: q.QPN, Recv: true})
	if err != nil || len(wcs) != 0 {
		t.Errorf("poll_cq = %v, %v", wcs, err)
	}
	st, err := c.QueryQP(ctx, q.QPN)
	if err != nil || st.State != "RTS" || st.QPN != q.QPN {
		t.Errorf("query_qp = %+v, %v", st, err)
	}
	if err := c.PostSend(ctx, SendSpec{QPN: q.QPN, Opcode: "send", MR: mr.MR, Length: 8}); err != nil {
		t.Fatal(err)
	}

	// Errors come back as RemoteErrors and leave the session usable.
	var re *RemoteError
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"read out of range", func() error { _, err := c.ReadMR(ctx, mr.MR, 250, 10); return err }()},
		{"unknown QP type", func() error { _, err := c.CreateQP(ctx, QPSpec{Type: "xrc"}); return err }()},
		{"unknown access", func() error { _, err := c.RegMR(ctx, MRSpec{Length: 8, Access: []string{"telepathy"}}); return err }()},
		{"unknown opcode", c.PostSend(ctx, SendSpec{QPN: q.QPN, Opcode: "teleport", MR: mr.MR})},
		{"no such QP", c.PostRecv(ctx, RecvSpec{QPN: 0xabcdef, MR: mr.MR, Length: 8})},
		{"no such region", func() error { _, err := c.ReadMR(ctx, 99, 0, 1); return err }()},
		{"zero-length region", func() error { _, err := c.RegMR(ctx, MRSpec{}); return err }()},
	} {
		if !errors.As(tc.err, &re) {
			t.Errorf("%s: error %v, want a *RemoteError", tc.name, tc.err)
		}
	}
	if err := c.call(ctx, "format_disk", nil, nil); !errors.Is(err, ErrUnsupportedOp) {
		t.Errorf("unknown op: %v, want ErrUnsupportedOp", err)
	}
	if err := c.call(ctx, OpQueryQP, map[string]any{"qpn": q.QPN, "colour": "red"}, nil); err == nil ||
		!strings.Contains(err.Error(), "unknown field") {
		t.Errorf("unknown argument: %v", err)
	}

	if err := c.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.QueryQP(ctx, q.QPN); !errors.As(err, &re) {
		t.Errorf("query_qp after reset: %v, want an error", err)
	}
	if _, err := c.ReadMR(ctx, mr.MR, 0, 1); !errors.As(err, &re) {
		t.Errorf("read_mr after reset: %v, want an error", err)
	}
}

// TestControlRawLines speaks the protocol by hand, as someone with netcat would.
func TestControlRawLines(t *testing.T) {
	_, addr := tcpControl(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for _, tc := range []struct {
		line   string
		ok     bool
		errHas string
	}{
		{`{"id":1,"op":"hello"}`, true, ""},
		{`this is not json`, false, "bad request"},
		{`{"id":3,"op":"reg_mr","args":{"length":16,"fill":7}}`, true, ""},
		{`{"id":4,"op":"read_mr","args":{"mr":1,"offset":0,"length":4}}`, true, ""},
		{`{"id":5,"op":"create_qp","args":{"type":"ud","qkey":17,"rq_psn":0,"sq_psn":0}}`, true, ""},
		{`{"id":6,"op":"nope"}`, false, "unsupported operation"},
	} {
		if _, err := conn.Write([]byte(tc.line + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var resp ControlResponse
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatalf("%s: answer %q: %v", tc.line, line, err)
		}
		if resp.OK != tc.ok || !strings.Contains(resp.Error, tc.errHas) {
			t.Errorf("%s: answer %s", tc.line, line)
		}
		if strings.Contains(tc.line, "read_mr") && !strings.Contains(string(line), `"data":"BwcHBw=="`) {
			t.Errorf("read_mr answer %s, want data BwcHBw== (base64 of 07070707)", line)
		}
	}
}
