package conform

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// IWARPFault makes an in-process iWARP peer misbehave, through a proxy between
// the tester and it that edits the MPA start frames and the FPDUs (whose CRC it
// recomputes after a change, when CRCs are in use).
type IWARPFault struct {
	// Name says what the fault does.
	Name string
	// Reply edits the peer's MPA Reply (in place, not its length).
	Reply func(f iwarp.MPAFrame)
	// Out edits the DDP segment of each FPDU the peer sends, or drops the
	// FPDU (false).
	Out func(ulpdu []byte) bool
	// In does the same for each FPDU the peer receives.
	In func(ulpdu []byte) bool
	// AcceptBadCRC recomputes the CRC of every FPDU the peer receives.
	AcceptBadCRC bool
	// BreakCRC flips a CRC bit of every FPDU the peer sends.
	BreakCRC bool
	// ForgeReply answers the tester's start frame, whatever it holds, with a
	// Reply accepting it, without asking the peer (a peer that accepts anything).
	ForgeReply bool
	// KeepOpen keeps the tester's connection open after the peer closes it.
	KeepOpen bool
}

// SelfIWARP is an in-process softrdma iWARP peer on loopback TCP, with its
// control server on an in-memory connection.
type SelfIWARP struct {
	// Env is the tester's environment: run IWARPCases(s.Env).
	Env *IWARPEnv
	// Device is the peer under test.
	Device *iwarp.Device

	client *Client
	done   chan struct{}
}

// NewSelfIWARP opens the peer; fault, if not nil, makes it misbehave.
func NewSelfIWARP(ctx context.Context, seed uint64, fault *IWARPFault) (*SelfIWARP, error) {
	dev, err := iwarp.Open(iwarp.DeviceConfig{Context: ib.ContextConfig{Seed: seed}})
	if err != nil {
		return nil, err
	}
	a, b := net.Pipe()
	s := &SelfIWARP{Device: dev, client: NewClient(a), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		(&Server{Device: dev, Transport: "iwarp", ListenHost: "127.0.0.1"}).ServeConn(b)
	}()
	if s.Env, err = NewIWARPEnv(ctx, s.client); err != nil {
		s.Close()
		return nil, err
	}
	s.Env.AnswerTimeout, s.Env.Silence = 2*time.Second, 50*time.Millisecond
	if fault != nil {
		s.Env.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			up, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			tester, proxy := net.Pipe()
			go runProxy(proxy, up, fault)
			return tester, nil
		}
	}
	return s, nil
}

// Close stops the control server (which tears down the peer's QPs).
func (s *SelfIWARP) Close() error {
	s.client.Close()
	<-s.done
	return nil
}

// runProxy relays between the tester (t) and the peer (p), applying f.
func runProxy(t, p net.Conn, f *IWARPFault) {
	defer t.Close()
	defer p.Close()
	if f.ForgeReply {
		forgeReply(t)
		return
	}
	var crc struct {
		sync.Mutex
		req, rep, known bool
		ready           chan struct{}
	}
	crc.ready = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	// Tester → peer: the Request, then FPDUs.
	go func() {
		defer wg.Done()
		defer p.Close()
		hdr, ok := relayStartFrame(t, p, nil)
		if !ok {
			return
		}
		crc.Lock()
		crc.req = iwarp.MPAFrame(hdr).CRC()
		crc.Unlock()
		<-crc.ready
		crc.Lock()
		on := crc.req || crc.rep
		crc.Unlock()
		relayFPDUs(t, p, on, f.In, f.AcceptBadCRC, false)
	}()
	// Peer → tester: the Reply, then FPDUs.
	go func() {
		defer wg.Done()
		if !f.KeepOpen {
			defer t.Close()
		}
		hdr, ok := relayStartFrame(p, t, f.Reply)
		crc.Lock()
		if ok {
			crc.rep = iwarp.MPAFrame(hdr).CRC()
		}
		crc.Unlock()
		close(crc.ready)
		if !ok {
			return
		}
		crc.Lock()
		on := crc.req || crc.rep
		crc.Unlock()
		relayFPDUs(p, t, on, f.Out, false, f.BreakCRC)
	}()
	wg.Wait()
}

// forgeReply reads whatever start frame the tester sends and accepts it.
func forgeReply(t net.Conn) {
	hdr := make([]byte, iwarp.MPAFrameHeaderLen)
	if _, err := io.ReadFull(t, hdr); err != nil {
		return
	}
	io.CopyN(io.Discard, t, int64(binary.BigEndian.Uint16(hdr[18:])))
	pd := make([]byte, 4)
	iwarp.MPAv2IRDORD(pd).SetIRD(4)
	iwarp.MPAv2IRDORD(pd).SetORD(4)
	rep := iwarp.MPAFrameFields{CRC: true, Enhanced: true, Revision: iwarp.MPARevision2, PrivateData: pd}
	b, _ := rep.Append(nil)
	t.Write(b)
	io.Copy(io.Discard, t)
}

// relayStartFrame copies one MPA start frame from src to dst, edited by edit; a
// frame whose private data length exceeds 512 is relayed as it is, and the
// rest of the stream raw. It reports whether a whole frame passed.
func relayStartFrame(src, dst net.Conn, edit func(iwarp.MPAFrame)) ([]byte, bool) {
	hdr := make([]byte, iwarp.MPAFrameHeaderLen)
	if _, err := io.ReadFull(src, hdr); err != nil {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(hdr[18:]))
	if n > iwarp.MPAMaxPrivateData {
		dst.Write(hdr)
		io.Copy(dst, src)
		return nil, false
	}
	frame := append(hdr, make([]byte, n)...)
	if _, err := io.ReadFull(src, frame[iwarp.MPAFrameHeaderLen:]); err != nil {
		return nil, false
	}
	if edit != nil {
		edit(iwarp.MPAFrame(frame))
	}
	if _, err := dst.Write(frame); err != nil {
		return nil, false
	}
	return frame, true
}

// relayFPDUs copies FPDUs from src to dst through edit.
func relayFPDUs(src, dst net.Conn, crcOn bool, edit func([]byte) bool, fixCRC, breakCRC bool) {
	for {
		var lb [2]byte
		if _, err := io.ReadFull(src, lb[:]); err != nil {
			return
		}
		b := make([]byte, iwarp.FPDULen(int(binary.BigEndian.Uint16(lb[:]))))
		copy(b, lb[:])
		if _, err := io.ReadFull(src, b[2:]); err != nil {
			dst.Write(b)
			return
		}
		f := iwarp.FPDU(b)
		goodCRC := !crcOn || f.VerifyCRC() == nil
		changed := false
		if edit != nil {
			before := string(f.ULPDU())
			if !edit(f.ULPDU()) {
				continue
			}
			changed = before != string(f.ULPDU())
		}
		if crcOn && ((changed && goodCRC) || fixCRC) {
			f.SetCRC(f.ComputeCRC())
		}
		if breakCRC {
			b[len(b)-1] ^= 0x01
		}
		if _, err := dst.Write(b); err != nil {
			return
		}
	}
}
