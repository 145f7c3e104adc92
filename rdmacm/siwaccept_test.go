package rdmacm_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/rdmacm"
)

// siwResponder models Linux siw 6.1 as the MPA responder, from siw_cm.c, as
// far as a client's first messages go:
//
//   - siw_proc_mpareq: the Reply echoes the Request's flags; its IRD is the
//     Request's ORD and its ORD the Request's IRD; with the P bit it answers
//     P and the Write RTR if offered, else the Read RTR, else the Write RTR.
//   - siw_accept sends the Reply and only then moves the socket's data-ready
//     upcall to the QP: data that arrives in between is left in the socket
//     by siw_cm_llp_data_ready (RDMA mode: ignored) until more data arrives,
//     whose upcall reads it all. The window is a time, which the model
//     counts in arrivals: the first two after the Reply are in it (in the
//     interop captures under emulation the client's first FPDU, 0.2 ms after
//     the Reply, was left there every time, and an application's first
//     message can follow an RTR as closely), the next reads everything.
//
// Of what it reads it answers a Read Request with a zero-length Read Response
// (the RTR's answer) and reports each SEND's payload on sends.
type siwResponder struct {
	ln    net.Listener
	sends chan string
	req   chan iwarp.MPAv2IRDORD // the Request's IRD/ORD words
}

func newSiwResponder(t *testing.T) *siwResponder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &siwResponder{ln: ln, sends: make(chan string, 8), req: make(chan iwarp.MPAv2IRDORD, 1)}
	t.Cleanup(func() { ln.Close() })
	go s.serve(t)
	return s
}

func (s *siwResponder) port() uint16 { return uint16(s.ln.Addr().(*net.TCPAddr).Port) }

func (s *siwResponder) serve(t *testing.T) {
	nc, err := s.ln.Accept()
	if err != nil {
		return
	}
	defer nc.Close()
	hdr := make([]byte, iwarp.MPAFrameHeaderLen)
	if _, err := io.ReadFull(nc, hdr); err != nil {
		t.Errorf("siw model: reading the request: %v", err)
		return
	}
	pd := make([]byte, iwarp.MPAFrame(hdr).PrivateDataLen())
	if _, err := io.ReadFull(nc, pd); err != nil || len(pd) < 4 {
		t.Errorf("siw model: the request's private data: %v (%d octets)", err, len(pd))
		return
	}
	q := iwarp.MPAv2IRDORD(pd[:4])
	s.req <- append(iwarp.MPAv2IRDORD(nil), q...)
	rep := append([]byte(nil), hdr...)
	copy(rep, "MPA ID Rep Frame")
	binary.BigEndian.PutUint16(rep[18:], 4)
	w := iwarp.MPAv2IRDORD(make([]byte, 4))
	w.SetIRD(max(q.ORD(), 1))
	w.SetORD(q.IRD())
	if q.PeerToPeer() {
		w.SetPeerToPeer(true)
		if q.WriteRTR() || !q.ReadRTR() {
			w.SetWriteRTR(true)
		} else {
			w.SetReadRTR(true)
		}
	}
	if _, err := nc.Write(append(rep, w...)); err != nil {
		return
	}
	var in []byte
	buf := make([]byte, 4096)
	for arrival := 0; ; arrival++ {
		n, err := nc.Read(buf)
		if err != nil {
			return
		}
		in = append(in, buf[:n]...)
		if arrival < 2 {
			continue // in the window: left in the socket
		}
		for {
			f, err := iwarp.ParseFPDU(in)
			if err != nil {
				break
			}
			in = in[f.Len():]
			d := iwarp.DDP(f.ULPDU())
			r := iwarp.RDMAP(f.ULPDU())
			switch r.Opcode() {
			case iwarp.OpReadRequest:
				rr := iwarp.ReadRequest(d.Payload())
				resp := iwarp.RDMAPFields{Opcode: iwarp.OpReadResponse, STag: rr.SinkSTag(), TO: rr.SinkTO(), Last: true}
				h := make([]byte, iwarp.DDPTaggedHeaderLen)
				resp.Encode(h)
				b, _ := iwarp.AppendFPDU(nil, false, h)
				nc.Write(b)
			case iwarp.OpSend:
				s.sends <- string(d.Payload())
			}
		}
	}
}

// TestIWARPClientToSiw: the libraries as the rdma_cm client of Linux siw
// (modelled by siwResponder) get their first SEND through. siw reads
// nothing that arrives right after its MPA Reply until more data comes; the
// client's first SEND was such data, and rping and perftest -R hung (TCP
// ACKs only). The initiator now asks for peer-to-peer mode with the Read RTR
// alone (siw would pick a Write, which has no answer), raising an ORD of 0 to
// 1, and ESTABLISHED comes only once the RTR is answered; zero-length Writes
// make siw read the RTR it left waiting. With rping's IRD = ORD = 1 and with
// perftest write_bw's 0 and 0.
func TestIWARPClientToSiw(t *testing.T) {
	for _, c := range []struct {
		name     string
		ird, ord uint8
	}{{"rping", 1, 1}, {"perftest write_bw", 0, 0}} {
		t.Run(c.name, func(t *testing.T) {
			a := newIWHost(t)
			siw := newSiwResponder(t)
			id := iwResolve(t, a, siw.port())
			qp := a.createQP(t, id)
			cp := rdmacm.DefaultConnParam()
			cp.ResponderResources, cp.InitiatorDepth = c.ird, c.ord
			must(t, id.Connect(cp))
			q := <-siw.req
			if !q.PeerToPeer() || !q.ReadRTR() || q.WriteRTR() || q.ZeroLengthRTR() || q.IRD() != uint16(c.ird) || q.ORD() != uint16(max(c.ord, 1)) {
				t.Errorf("the request's IRD/ORD words %04x %04x: want P, the Read RTR alone, IRD %d, ORD %d",
					q.IRDWord(), q.ORDWord(), c.ird, max(c.ord, 1))
			}
			wait(t, id, rdmacm.EventEstablished)
			copy(a.buf, "rdma-ping")
			must(t, qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 9)}, Signaled: true}))
			select {
			case got := <-siw.sends:
				if got != "rdma-ping" {
					t.Errorf("siw got SEND %q", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("siw never read the client's first SEND (left in its socket after the MPA Reply)")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			must(t, a.cq.Wait(ctx))
			must(t, id.Destroy())
		})
	}
}
