package decode

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/roce"
)

// superDatagram builds what a capture on the sending host holds when the UDP backend
// sends run (RoCEv2 frames of one flow, all of one UDP payload length but the last,
// which may be shorter) as one UDP GSO message: one datagram with the first frame's
// headers and all the UDP payloads back to back, each with the ICRC for the headers it
// leaves with once segmented (its lengths and, for IPv4, Identification one up per
// segment), as the RoCE device computes it for a run (netio.DatagramWriter).
func superDatagram(t testing.TB, run []frameOut) frameOut {
	t.Helper()
	var first roce.Frame
	if err := first.DecodeEthernet(run[0].data); err != nil {
		t.Fatal(err)
	}
	hdrEnd := first.HeaderLen()
	out := append([]byte(nil), run[0].data[:hdrEnd]...)
	scratch := make([]byte, 128)
	for j, fr := range run {
		var f roce.Frame
		if err := f.DecodeEthernet(fr.data); err != nil {
			t.Fatal(err)
		}
		seg := append(append([]byte(nil), f.IB...), 0, 0, 0, 0)
		ip, udp := segmentHeaders(first.IP, first.UDP, first.IPv6, len(seg), j, scratch)
		binary.LittleEndian.PutUint32(seg[len(f.IB):], roce.ComputeICRC(ip, udp, f.IB))
		out = append(out, seg...)
	}
	udpLen := len(out) - hdrEnd + roce.UDPLen
	ipOff := hdrEnd - len(first.UDP) - len(first.IP)
	ip := out[ipOff : ipOff+len(first.IP)]
	if first.IPv6 {
		binary.BigEndian.PutUint16(ip[4:6], uint16(udpLen))
	} else {
		binary.BigEndian.PutUint16(ip[2:4], uint16(len(ip)+udpLen))
		binary.BigEndian.PutUint16(ip[10:12], 0)
		binary.BigEndian.PutUint16(ip[10:12], header.IPv4Checksum(ip))
	}
	binary.BigEndian.PutUint16(out[hdrEnd-len(first.UDP)+4:], uint16(udpLen))
	ci := run[0].ci
	ci.CaptureLength, ci.Length = len(out), len(out)
	return frameOut{ci, out}
}

var frameColumnRE = regexp.MustCompile(`(?m)^ *[0-9]+ `)

// TestGSOSuperDatagram: runs of equal-length RoCE packets of one flow (the RDMA WRITE
// Middles and Last of rxe-write-bw, the READ responses of rxe-read-bw, SENDs of
// IPv6 pingpong gathered from one direction), each made one UDP GSO super-datagram,
// decode as the packets sent one by one at that instant: the same packet lines (on the
// datagram's frame number), the same flows, no error, and a note naming the split.
// Taken whole, such a datagram was an ICRC error and a PSN gap.
func TestGSOSuperDatagram(t *testing.T) {
	for _, tc := range []struct {
		file       string
		run        []int // frame numbers, 1-based
		shrinkLast int   // payload bytes taken off the run's last packet
		splits     string
	}{
		{"rxe-write-bw.pcap", []int{21, 22, 23}, 0, "3 datagrams of 1040 bytes (the last 1040)"},
		{"rxe-write-bw.pcap", []int{21, 22, 23}, 512, "3 datagrams of 1040 bytes (the last 528)"},
		{"rxe-write-bw.pcap", []int{21, 22}, 1020, "2 datagrams of 1040 bytes (the last 20)"},
		{"rxe-write-bw.pcap", []int{21, 22, 23, 25, 26}, 0, "5 datagrams of 1040 bytes (the last 1040)"},
		{"rxe-read-bw.pcap", nil, 0, ""},
		{"rxe-rc-pingpong-ipv6.pcap", nil, 0, ""},
	} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, tc.file)))
		if tc.shrinkLast > 0 {
			n := tc.run[len(tc.run)-1]
			frames[n-1] = shrink(t, frames[n-1], tc.shrinkLast)
		}
		run := tc.run
		if run == nil {
			run = equalLengthRun(t, frames)
		}
		if len(run) < 2 {
			t.Fatalf("%s: no run of equal-length packets", tc.file)
		}
		// Sent one by one, at the time of the run's first frame: the frames in order,
		// the rest of the capture after them.
		var sep, gso []frameOut
		inRun := map[int]bool{}
		for _, n := range run {
			inRun[n] = true
		}
		for i, fr := range frames {
			switch {
			case i+1 == run[0]:
				for _, n := range run {
					f := frames[n-1]
					f.ci.Timestamp = fr.ci.Timestamp
					sep = append(sep, f)
				}
				gso = append(gso, superDatagram(t, pick(frames, run)))
			case inRun[i+1]:
			default:
				sep = append(sep, fr)
				gso = append(gso, fr)
			}
		}
		want, wantOut, err := decodeBytes(t, writeCapture(t, sep, layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		res, out, err := decodeBytes(t, writeCapture(t, gso, layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%s frames %v as one GSO datagram", tc.file, run)
		if len(res.Errors) != 0 || res.Packets != want.Packets || res.Frames != want.Frames-len(run)+1 {
			t.Errorf("%s: errors %v, %d packets (want %d), %d frames", what, res.Errors, res.Packets, want.Packets, res.Frames)
		}
		if len(res.Notes) != len(want.Notes)+1 ||
			!strings.Contains(fmt.Sprint(res.Notes), fmt.Sprintf("frame %d is a UDP GSO datagram captured before segmentation (on the sending host), %d datagrams once segmented", run[0], len(run))) ||
			tc.splits != "" && !strings.Contains(fmt.Sprint(res.Notes), tc.splits) {
			t.Errorf("%s: notes %v", what, res.Notes)
		}
		if !reflect.DeepEqual(res.Flows, want.Flows) {
			t.Errorf("%s: flows\n%+v\nwant\n%+v", what, res.Flows, want.Flows)
		}
		lines := func(s string) string {
			var b strings.Builder
			for _, l := range strings.Split(s, "\n") {
				if packetLineRE.MatchString(l) {
					b.WriteString(frameColumnRE.ReplaceAllString(l, "") + "\n")
				}
			}
			return b.String()
		}
		if lines(out) != lines(wantOut) {
			t.Errorf("%s: packet lines\n%s\nwant\n%s", what, lines(out), lines(wantOut))
		}
		// Cut by a snap length, the datagram cannot be split: when its payload is
		// longer than any RoCE packet's, its error says what it seems to be.
		var f roce.Frame
		if err := f.DecodeEthernet(gso[run[0]-1].data); err != nil {
			t.Fatal(err)
		}
		if len(f.IB)-12 > maxIBMTU {
			res, _, err := decodeBytes(t, writeCapture(t, cutFrame(gso, run[0], 128), layers.LinkTypeEthernet, false), allOn)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) != 1 || res.Cut != 0 || res.Errors[0].Frame != run[0] ||
				!strings.Contains(res.Errors[0].Reason, "a UDP GSO datagram captured before segmentation, which is not split (cut by the capture)") {
				t.Errorf("%s, cut to 128 bytes: errors %v (%d cut)", what, res.Errors, res.Cut)
			}
		}
	}
}

// shrink returns the RoCEv2-over-IPv4 frame fr with n fewer payload bytes (n a multiple
// of 4), its lengths and ICRC those of the shorter packet.
func shrink(t testing.TB, fr frameOut, n int) frameOut {
	t.Helper()
	d := append([]byte(nil), fr.data[:len(fr.data)-roce.ICRCLen-n]...)
	d = append(d, fr.data[len(fr.data)-roce.ICRCLen:]...)
	ip := d[14:34]
	binary.BigEndian.PutUint16(ip[2:4], binary.BigEndian.Uint16(ip[2:4])-uint16(n))
	binary.BigEndian.PutUint16(d[34+4:], binary.BigEndian.Uint16(d[34+4:])-uint16(n))
	ci := fr.ci
	ci.CaptureLength, ci.Length = len(d), len(d)
	// One segment alone: its headers unchanged, its ICRC recomputed.
	return superDatagram(t, []frameOut{{ci, d}})
}

func pick(frames []frameOut, numbers []int) []frameOut {
	var out []frameOut
	for _, n := range numbers {
		out = append(out, frames[n-1])
	}
	return out
}

// equalLengthRun returns the frame numbers of the first run of at least three RoCEv2
// frames of one direction and destination QP with equal UDP payload lengths (not
// necessarily consecutive in the capture).
func equalLengthRun(t testing.TB, frames []frameOut) []int {
	type key struct {
		src, dst string
		qp       uint32
		n        int
	}
	runs := map[key][]int{}
	for i, fr := range frames {
		var f roce.Frame
		if f.DecodeEthernet(fr.data) != nil || len(f.IB) < 12 || f.IB[0] == 0x11 {
			continue // not RoCE, or an ACK (rxe's ACKs are sent alone)
		}
		k := key{f.Src.String(), f.Dst.String(), binary.BigEndian.Uint32(f.IB[4:8]) & 0xffffff, len(f.IB)}
		runs[k] = append(runs[k], i+1)
		if len(runs[k]) == 3 {
			return runs[k]
		}
	}
	return nil
}
