package decode

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// flowsWithoutCRCErrors returns the flows with their error counts cleared: what the
// packets that were believed say.
func flowsWithoutCRCErrors(flows []FlowSummary) []FlowSummary {
	out := append([]FlowSummary(nil), flows...)
	for i := range out {
		out[i].Errors, out[i].ICRCErrors, out[i].CRCErrors = 0, 0, 0
	}
	return out
}

// TestCorruptRoCEFrameKeptOutOfStats corrupts one byte of one RoCE frame at a time, in
// every RoCE frame of every rxe capture: its opcode, destination QP, PSN, the first byte
// after the BTH (an AETH's syndrome, a RETH's VA, a MAD's header, the payload) and the
// byte before the ICRC. The frame's ICRC is then wrong, and the flows must be those of
// the capture without that frame (its UDP port changed, so that it is not RoCE), but for
// the count of ICRC errors, which is 1 in all and 1 in the flow its headers name when
// that flow exists. A packet that fails its ICRC used to feed the PSN and message
// counts: a corrupted PSN made every later packet of its QP a duplicate.
func TestCorruptRoCEFrameKeptOutOfStats(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(captureDir, "rxe-*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatal("no rxe captures", err)
	}
	for _, file := range files {
		frames := readFrames(t, readFile(t, file))
		for i, fr := range frames {
			var f roce.Frame
			if f.DecodeEthernet(fr.data) != nil || len(f.IB) < ibtransport.BTHLen+roce.ICRCLen {
				continue
			}
			ib := f.HeaderLen()
			// Not RoCE: the frame with UDP destination port 4792 (the same timestamp,
			// so the flows' times are the same).
			absent := append([]frameOut(nil), frames...)
			d := append([]byte(nil), fr.data...)
			binary.BigEndian.PutUint16(d[ib-len(f.UDP)+2:], roce.UDPPort+1)
			absent[i] = frameOut{fr.ci, d}
			want, _, err := decodeBytes(t, writeCapture(t, absent, layers.LinkTypeEthernet, false), allOn)
			if err != nil {
				t.Fatal(err)
			}
			for _, pos := range []struct {
				name string
				off  int
				xor  byte
			}{
				{"opcode", ib, 0x04},
				{"destination QP", ib + 7, 0x01},
				{"PSN", ib + 9, 0x40},
				{"PSN low byte", ib + 11, 0x80},
				{"after the BTH", ib + ibtransport.BTHLen, 0x10},
				{"before the ICRC", ib + len(f.IB) - roce.ICRCLen - 1, 0x01},
			} {
				what := fmt.Sprintf("%s frame %d, %s corrupted", filepath.Base(file), i+1, pos.name)
				bad := append([]frameOut(nil), frames...)
				d := append([]byte(nil), fr.data...)
				d[pos.off] ^= pos.xor
				bad[i] = frameOut{fr.ci, d}
				res, _, err := decodeBytes(t, writeCapture(t, bad, layers.LinkTypeEthernet, false), allOn)
				if err != nil {
					t.Fatal(err)
				}
				if res.CRCErrors != 1 || len(res.Errors) != len(want.Errors)+1 || !strings.Contains(fmt.Sprint(res.Errors), fmt.Sprintf("frame %d: ", i+1)) {
					t.Errorf("%s: %d CRC errors, errors %v", what, res.CRCErrors, res.Errors)
				}
				inFlows := 0
				for _, fl := range res.Flows {
					inFlows += fl.ICRCErrors
					if fl.Errors < fl.ICRCErrors {
						t.Errorf("%s: flow with %d errors, %d ICRC errors", what, fl.Errors, fl.ICRCErrors)
					}
				}
				if inFlows > 1 || pos.name != "destination QP" && pos.name != "opcode" && inFlows != 1 {
					t.Errorf("%s: %d ICRC errors in the flows", what, inFlows)
				}
				if got, w := flowsWithoutCRCErrors(res.Flows), flowsWithoutCRCErrors(want.Flows); !reflect.DeepEqual(got, w) {
					t.Errorf("%s: flows\n%+v\nwant (the frame absent)\n%+v", what, got, w)
				}
			}
		}
	}
}

// TestCorruptFPDUKeptOutOfStats corrupts, one FPDU at a time, the last payload byte (or,
// for an FPDU without payload, the RDMAP opcode, made a Terminate) of every FPDU that
// fills its TCP segment in siw's captures with CRCs. Its CRC32c is then wrong: the flow
// counts it as a CRC error and an error, and its opcode, message, payload and Terminate
// nowhere; the TCP counts (segments, bytes, retransmissions) and the FPDU framing are
// those of the clean capture.
func TestCorruptFPDUKeptOutOfStats(t *testing.T) {
	for _, name := range []string{"siw-crc-rping.pcap", "siw-crc-write-bw.pcap"} {
		b := readFile(t, filepath.Join(captureDir, name))
		frames := readFrames(t, b)
		clean := decodeRun(t, b)
		if len(clean.res.Errors) != 0 {
			t.Fatalf("%s: %v", name, clean.res.Errors)
		}
		tested := 0
		for _, p := range clean.pkts {
			if p.CRC != "ok" || p.DDP == nil || p.ULPDULen == nil {
				continue
			}
			fr := frames[p.Frame-1]
			tcpOff := 14 + 20 + int(fr.data[14+20+12]>>4)*4
			fpdu := 2 + *p.ULPDULen
			fpdu += (4 - fpdu%4) % 4
			if len(fr.data)-tcpOff != fpdu+4 {
				continue // not alone in its segment
			}
			d := append([]byte(nil), fr.data...)
			off, xor := len(d)-4-1-(fpdu-2-*p.ULPDULen), byte(0x01) // last ULPDU byte
			if *p.PayloadLen == 0 {
				off, xor = tcpOff+3, d[tcpOff+3]&0x0f^byte(0x07) // RDMAP opcode → Terminate
			}
			d[off] ^= xor
			bad := append([]frameOut(nil), frames...)
			bad[p.Frame-1] = frameOut{fr.ci, d}
			res, _, err := decodeBytes(t, writeCapture(t, bad, layers.LinkTypeEthernet, false), allOn)
			if err != nil {
				t.Fatal(err)
			}
			tested++
			what := fmt.Sprintf("%s frame %d (%s) corrupted", name, p.Frame, p.Opcode)
			if res.CRCErrors != 1 || len(res.Errors) != 1 || res.Errors[0].Frame != p.Frame {
				t.Errorf("%s: %d CRC errors, errors %v", what, res.CRCErrors, res.Errors)
			}
			if len(res.Flows) != len(clean.res.Flows) {
				t.Fatalf("%s: %d flows, want %d", what, len(res.Flows), len(clean.res.Flows))
			}
			for i := range res.Flows {
				got, want := res.Flows[i], clean.res.Flows[i]
				if fmt.Sprint(got.A, got.B) != fmt.Sprint(want.A, want.B) {
					t.Fatalf("%s: flow %d is %v ↔ %v, want %v ↔ %v", what, i, got.A, got.B, want.A, want.B)
				}
				sum := func(m map[string]int) (n int) {
					for _, v := range m {
						n += v
					}
					return n
				}
				hit := got.CRCErrors
				if hit > 1 || got.Errors != hit || got.Terminates != want.Terminates ||
					sum(got.Opcodes) != sum(want.Opcodes)-hit || got.Opcodes[p.Opcode] != want.Opcodes[p.Opcode]-hit ||
					sum(got.Messages) > sum(want.Messages) || sum(want.Messages)-sum(got.Messages) > hit ||
					got.PayloadBytes != want.PayloadBytes-hit**p.PayloadLen ||
					got.Packets != want.Packets || got.Bytes != want.Bytes || got.FPDUs != want.FPDUs ||
					got.Duplicates != want.Duplicates || got.LostBytes != want.LostBytes {
					t.Errorf("%s: flow %d\n%+v\nclean\n%+v", what, i, got, want)
				}
			}
		}
		if tested < 10 {
			t.Errorf("%s: %d FPDUs corrupted", name, tested)
		}
	}
}
