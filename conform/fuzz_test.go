package conform

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// FuzzControlRequest feeds arbitrary operations and arguments to a control
// session: it must answer every one (an error is an answer) without panicking,
// with a result that encodes as JSON, and reset must always leave it clean.
func FuzzControlRequest(f *testing.F) {
	for _, seed := range []struct{ op, args string }{
		{OpHello, ""},
		{OpCreateQP, `{"type":"rc","remote_ip":"10.47.91.1","remote_qpn":5,"rq_psn":1,"sq_psn":2,"access":["remote_read"]}`},
		{OpCreateQP, `{"type":"ud","qkey":7}`},
		{OpRegMR, `{"length":64,"fill":3,"access":["remote_write"]}`},
		{OpReadMR, `{"mr":1,"offset":0,"length":8}`},
		{OpWriteMR, `{"mr":1,"offset":60,"data":"AQIDBA=="}`},
		{OpPostRecv, `{"qpn":17,"mr":1,"length":8,"count":3}`},
		{OpPostSend, `{"qpn":17,"opcode":"send","mr":1,"length":8}`},
		{OpPollCQ, `{"qpn":17,"recv":true}`},
		{OpQueryQP, `{"qpn":17}`},
		{OpReset, ""},
		{"nope", "{"},
	} {
		f.Add(seed.op, []byte(seed.args))
	}
	s := newSelf(f, nil)
	srv := &Server{Device: s.Device}
	f.Fuzz(func(t *testing.T, op string, args []byte) {
		ses := &session{srv: srv, ctx: s.Device.Context(), qps: map[uint32]*sessionQP{}, mrs: map[int]*ib.MR{}}
		defer ses.reset()
		// A region and a QP exist, so that requests naming them get past the lookup.
		ses.dispatch(OpRegMR, json.RawMessage(`{"length":64}`))
		ses.dispatch(OpCreateQP, json.RawMessage(`{"type":"rc","remote_ip":"10.47.91.1","remote_qpn":5,"rq_psn":1,"sq_psn":2}`))
		for _, o := range []string{op, OpQueryQP, op} {
			res, err := ses.dispatch(o, json.RawMessage(args))
			if err == nil {
				if _, err := json.Marshal(res); err != nil {
					t.Fatalf("%s: result does not encode: %v", o, err)
				}
			}
		}
		ses.reset()
		if len(ses.qps) != 0 || len(ses.mrs) != 0 || ses.pd != nil {
			t.Fatal("reset left objects behind")
		}
	})
}

// FuzzWireDecode feeds arbitrary frames to the tester's receive side: no
// panic, and a decoded packet's views lie inside the frame.
func FuzzWireDecode(f *testing.F) {
	w, err := NewWire(WireConfig{Link: nil, LocalIP: SelfPeerIP, PeerIP: SelfTesterIP, DstPort: 4791})
	if err != nil {
		f.Fatal(err)
	}
	// Seeds: frames the tester itself builds, good and spoiled.
	for _, p := range []*Packet{
		NewPacket(ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCSendOnly, PKey: 0xffff, DestQP: 9}}, []byte("hello")),
		{Fields: ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCAcknowledge, DestQP: 9}}, PadCount: 3, PadBytes: 0},
		{Fields: ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCRDMAWriteOnly, DestQP: 9}}, Payload: []byte{1}, PadCount: 2, PadBytes: 1, BadICRC: true},
	} {
		frame, _, err := w.Build(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		ws := []*Wire{w, {hdr: w.hdr, unknownIPID: true}}
		ws[1].hdr.DstPort = 4792
		for _, w := range ws {
			c := w.decode(append([]byte(nil), frame...), time.Time{})
			if c == nil {
				continue
			}
			if len(c.IB) > len(c.Frame) {
				t.Fatalf("IB %d bytes > frame %d", len(c.IB), len(c.Frame))
			}
			if c.Err == nil && len(c.Pkt.BTH) != ib.BTHLen {
				t.Fatal("decoded without a BTH")
			}
			describe(c)
		}
	})
}

// streamConn is a net.Conn that reads a fixed byte string and discards writes.
type streamConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *streamConn) Read(b []byte) (int, error) {
	if c.r.Len() == 0 {
		return 0, io.EOF
	}
	return c.r.Read(b)
}
func (c *streamConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
func (c *streamConn) Close() error                     { return nil }

// FuzzIWARPStream feeds an arbitrary peer stream to the iWARP tester's reader:
// an MPA Reply, then FPDUs. It must never panic, and every segment it returns
// lies within what was read.
func FuzzIWARPStream(f *testing.F) {
	rep := iwarp.MPAFrameFields{CRC: true, Enhanced: true, Revision: 2, PrivateData: []byte{0, 4, 0, 4}}
	b, _ := rep.Append(nil)
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpReadResponse, Last: true, STag: 0x1234, TO: 0x500})
	seg := make([]byte, h.Len()+5)
	h.Encode(seg)
	fp, _ := iwarp.AppendFPDU(nil, true, seg)
	term := iwarp.TerminateFields{Layer: iwarp.LayerDDP, EType: iwarp.ETypeDDPTaggedBuffer, DDPHeader: seg[:h.Len()]}
	tb := make([]byte, term.Len())
	term.Encode(tb)
	th := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpTerminate, Last: true, MSN: 1})
	tseg := make([]byte, th.Len()+len(tb))
	th.Encode(tseg)
	copy(tseg[th.Len():], tb)
	tf, _ := iwarp.AppendFPDU(nil, true, tseg)
	f.Add(append(append(append([]byte(nil), b...), fp...), tf...))
	f.Add(b)
	f.Add([]byte("MPA ID Rep Frame\x40\x02\xff\xff"))
	env := &IWARPEnv{AnswerTimeout: time.Millisecond}
	f.Fuzz(func(t *testing.T, stream []byte) {
		nc := &streamConn{r: bytes.NewReader(stream)}
		c := &iwConn{t: &iwt{e: env}, nc: nc, br: bufio.NewReader(nc), crc: true}
		if _, err := c.readReply(); err != nil {
			return
		}
		for i := 0; i < 64; i++ {
			s, err := c.next(time.Now().Add(time.Second))
			if s != nil {
				if len(s.raw) > len(stream) {
					t.Fatalf("segment of %d octets from a stream of %d", len(s.raw), len(stream))
				}
				describeSeg(s)
			}
			if err != nil {
				return
			}
		}
	})
}
