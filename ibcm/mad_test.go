package ibcm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// captureMADs returns every MAD (UD SEND Only to QP1) of a capture, in order.
func captureMADs(tb testing.TB, name string) []MAD {
	tb.Helper()
	var mads []MAD
	for i, f := range roceFrames(tb, name) {
		var p ibtransport.Packet
		if err := p.Decode(f.IB); err != nil {
			tb.Fatalf("%s RoCE frame %d: %v", name, i, err)
		}
		if p.BTH.DestQP() != GSIQPN {
			continue
		}
		m, err := MADFromPacket(&p)
		if err != nil {
			tb.Fatalf("%s RoCE frame %d: %v", name, i, err)
		}
		mads = append(mads, m)
	}
	return mads
}

// TestCaptureMADs decodes every MAD of both rdma_cm captures: each is a CM MAD, Send,
// class version 2, with the attribute sequence tshark shows.
func TestCaptureMADs(t *testing.T) {
	tests := []struct {
		capture string
		attrs   []string
		tids    []uint64
	}{
		{"rxe-rdma-cm-rping.pcap",
			[]string{"ConnectRequest", "ConnectReply", "ReadyToUse", "DisconnectRequest", "DisconnectReply"},
			[]uint64{0x24f4e0520, 0x24f4e0520, 0x24f4e0520, 0x24f4e0520, 0x24f4e0520}},
		{"rxe-write-bw-rdma-cm.pcap",
			[]string{"ConnectRequest", "ConnectReply", "ReadyToUse", "ConnectRequest", "ConnectReply", "ReadyToUse",
				"DisconnectRequest", "DisconnectReply", "DisconnectRequest", "DisconnectReply"},
			[]uint64{0x24f4e0521, 0x24f4e0521, 0x24f4e0521, 0x24f4e0522, 0x24f4e0522, 0x24f4e0522,
				0x24f4e0522, 0x24f4e0522, 0x24f4e0521, 0x24f4e0521}},
	}
	for _, tc := range tests {
		mads := captureMADs(t, tc.capture)
		if len(mads) != len(tc.attrs) {
			t.Fatalf("%s: %d MADs, want %d", tc.capture, len(mads), len(tc.attrs))
		}
		for i, m := range mads {
			if err := Check(m); err != nil {
				t.Errorf("%s MAD %d: %v", tc.capture, i, err)
			}
			if got := m.Attribute().String(); got != tc.attrs[i] {
				t.Errorf("%s MAD %d: %s, want %s", tc.capture, i, got, tc.attrs[i])
			}
			if m.BaseVersion() != 1 || m.MgmtClass() != MgmtClassCM || m.MgmtClass().String() != "CM" ||
				m.ClassVersion() != 2 || m.Method() != MADMethodSend || m.Method().String() != "Send" ||
				m.IsResponse() || m.Status() != 0 || m.ClassSpecific() != 0 || m.AttributeModifier() != 0 {
				t.Errorf("%s MAD %d: header %+v", tc.capture, i, m.Fields())
			}
			if m.TransactionID() != tc.tids[i] {
				t.Errorf("%s MAD %d: transaction ID %#x, want %#x", tc.capture, i, m.TransactionID(), tc.tids[i])
			}
			// The header re-encodes to the same bytes.
			c := make(MAD, MADLen)
			hf := m.Fields()
			c.Encode(&hf)
			if !bytes.Equal(c[:MADHeaderLen], m[:MADHeaderLen]) {
				t.Errorf("%s MAD %d: header re-encodes to %x, want %x", tc.capture, i, c[:MADHeaderLen], m[:MADHeaderLen])
			}
		}
	}
}

func TestMADAccessors(t *testing.T) {
	m := make(MAD, MADLen)
	m.Encode(&MADFields{
		MgmtClass:         MgmtClassSubnAdm,
		ClassVersion:      2,
		Method:            MADMethodGetResp,
		Status:            0x1234,
		ClassSpecific:     0x5678,
		TransactionID:     0x0102030405060708,
		AttributeID:       0x0035,
		AttributeModifier: 0xA0B0C0D0,
	})
	want := []byte{1, 3, 2, 0x81, 0x12, 0x34, 0x56, 0x78, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x35, 0, 0, 0xA0, 0xB0, 0xC0, 0xD0}
	if !bytes.Equal(m[:MADHeaderLen], want) {
		t.Fatalf("header %x, want %x", m[:MADHeaderLen], want)
	}
	if !m.IsResponse() || m.Method().String() != "GetResp" || m.MgmtClass().String() != "SubnAdm" {
		t.Fatal(m.Method(), m.MgmtClass())
	}
	if len(m.Data()) != MADDataLen || cap(m.Data()) != MADDataLen {
		t.Fatal("data length")
	}
	if MgmtClass(0x42).String() != "MgmtClass(0x42)" || MADMethod(0x42).String() != "MADMethod(0x42)" {
		t.Fatal("unknown names")
	}
	if err := Check(m); !errors.Is(err, header.ErrInvalid) {
		t.Fatalf("Check on an SA MAD: %v", err)
	}
}

func TestDecodeMADErrors(t *testing.T) {
	good := make([]byte, MADLen)
	good[0] = 1
	if _, err := DecodeMAD(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		kind error
		text string
	}{
		{"short", good[:255], header.ErrTruncated, "mad: length 255 < 256"},
		{"long", append(bytes.Clone(good), 0), header.ErrInvalid, "mad: length 257 > 256"},
		{"base version", append([]byte{2}, good[1:]...), header.ErrUnsupported, "mad: base version 2 != 1"},
	} {
		_, err := DecodeMAD(tc.b)
		if !errors.Is(err, tc.kind) || err.Error() != tc.text {
			t.Errorf("%s: %v, want %v %q", tc.name, err, tc.kind, tc.text)
		}
	}
}

// TestMADFromPacketErrors breaks the transport around a captured MAD.
func TestMADFromPacketErrors(t *testing.T) {
	var f roce.Frame
	if err := f.DecodeEthernet(readCapture(t, "rxe-rdma-cm-rping.pcap")[0]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fn   func(ib []byte)
		text string
	}{
		{"qp", func(ib []byte) { ib[7] = 2 }, "mad: bth destination qp 2 != 1"},
		{"qkey", func(ib []byte) { ib[12] = 0 }, "mad: deth q_key 0x10000 != 0x80010000"},
		{"opcode", func(ib []byte) { ib[0] = byte(ibtransport.OpcodeUDSendOnlyWithImm) }, "mad: bth opcode 0x65 != 0x64"},
	} {
		ib := bytes.Clone(f.IB)
		tc.fn(ib)
		var p ibtransport.Packet
		if err := p.Decode(ib); err != nil {
			t.Fatal(err)
		}
		if _, err := MADFromPacket(&p); err == nil || err.Error() != tc.text {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.text)
		}
	}
	// A MAD cut short by the transport.
	var p ibtransport.Packet
	if err := p.Decode(f.IB[:len(f.IB)-1]); err != nil {
		t.Fatal(err)
	}
	if _, err := MADFromPacket(&p); !errors.Is(err, header.ErrTruncated) {
		t.Errorf("short payload: %v", err)
	}
	if _, err := MADFromPacket(&ibtransport.Packet{}); !errors.Is(err, header.ErrTruncated) {
		t.Errorf("empty packet: %v", err)
	}
}

// FuzzMAD decodes arbitrary bytes as a MAD and, when they are one, reads every CM
// view and checks that encoding what was read is stable.
func FuzzMAD(f *testing.F) {
	for _, name := range []string{"rxe-rdma-cm-rping.pcap", "rxe-write-bw-rdma-cm.pcap"} {
		for _, m := range captureMADs(f, name) {
			f.Add([]byte(m))
		}
	}
	f.Add(make([]byte, MADLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMAD(b)
		if err != nil {
			if !errors.Is(err, header.ErrTruncated) && !errors.Is(err, header.ErrInvalid) && !errors.Is(err, header.ErrUnsupported) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		hf := m.Fields()
		c := make(MAD, MADLen)
		c.Encode(&hf)
		if c.Fields() != hf {
			t.Fatalf("header not stable: %+v vs %+v", c.Fields(), hf)
		}
		_ = m.Attribute().String()
		if Check(m) != nil {
			return
		}
		exerciseCM(t, m)
	})
}

// exerciseCM reads the view of m's attribute, re-encodes it where a Fields struct
// exists and checks the result reads back the same.
func exerciseCM(t *testing.T, m MAD) {
	t.Helper()
	out := make(MAD, MADLen)
	switch m.Attribute() {
	case AttrREQ:
		r := m.REQ()
		fl := r.Fields()
		Encode(out, AttrREQ, m.TransactionID())
		out.REQ().Encode(&fl)
		if got := out.REQ().Fields(); !equalREQ(got, fl) {
			t.Fatalf("REQ not stable:\n%+v\n%+v", got, fl)
		}
		if h := CMAHeader(r.PrivateData()); h.Check() == nil {
			hf := h.Fields()
			c := make(CMAHeader, CMAHeaderLen)
			c.Encode(&hf)
			if c.Fields() != hf {
				t.Fatalf("CMA header not stable: %+v vs %+v", c.Fields(), hf)
			}
		}
		_, _, _ = ParseCMAServiceID(r.ServiceID())
	case AttrREP:
		fl := m.REP().Fields()
		Encode(out, AttrREP, m.TransactionID())
		out.REP().Encode(&fl)
		if got := out.REP().Fields(); !equalREP(got, fl) {
			t.Fatalf("REP not stable:\n%+v\n%+v", got, fl)
		}
	case AttrREJ:
		r := m.REJ()
		_ = r.Reason().String()
		_, _, _, _ = r.LocalCommID(), r.RemoteCommID(), r.MessageRejected(), r.PrivateData()
		if len(r.ARI()) > REJARILen {
			t.Fatal("ARI too long")
		}
	case AttrMRA:
		r := m.MRA()
		_, _, _, _, _ = r.LocalCommID(), r.RemoteCommID(), r.MessageMRAed(), r.ServiceTimeout(), r.PrivateData()
	case AttrRTU:
		r := m.RTU()
		_, _, _ = r.LocalCommID(), r.RemoteCommID(), r.PrivateData()
	case AttrDREQ:
		r := m.DREQ()
		_, _, _, _ = r.LocalCommID(), r.RemoteCommID(), r.RemoteQPN(), r.PrivateData()
	case AttrDREP:
		r := m.DREP()
		_, _, _ = r.LocalCommID(), r.RemoteCommID(), r.PrivateData()
	case AttrSIDRREQ:
		r := m.SIDRREQ()
		_, _, _, _ = r.RequestID(), r.PKey(), r.ServiceID(), r.PrivateData()
	case AttrSIDRREP:
		r := m.SIDRREP()
		_, _, _, _, _, _ = r.RequestID(), r.Status(), r.QPN(), r.ServiceID(), r.QKey(), r.PrivateData()
		if len(r.AdditionalInfo()) > SIDRREPInfoLen {
			t.Fatal("additional info too long")
		}
	}
}

func equalREQ(a, b REQFields) bool { return reflect.DeepEqual(a, b) }

func equalREP(a, b REPFields) bool { return reflect.DeepEqual(a, b) }
