package interop_test

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/test/interop"
)

// ethertypeGuessFrame is a valid RoCEv2 RDMA WRITE Only of 2 bytes (88 e7,
// then two pad bytes and a good ICRC) that softrdma perf sent to rxe in CI
// and that tshark calls malformed: it reads the payload as Ethertype 0x88e7
// (802.1ah) with a zero reserved word.
const ethertypeGuessFrame = "00000000000086e871588a7a08004500" +
	"004000004000ff1166e90a4d00010a4d" +
	"0029ca1812b7002c00000a20ffff0000" +
	"0011809f0c910000 55ae9de440000000" +
	"02fe0000000288e7000051733e07"

// TestTsharkMalformed checks the malformed-frame count every interop test
// relies on: tshark's Ethertype guess on a valid frame is not counted, the
// same frame cut inside its RETH is.
func TestTsharkMalformed(t *testing.T) {
	frame, err := hex.DecodeString(strings.ReplaceAll(ethertypeGuessFrame, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		frames         [][]byte
		malformed, ibN int
	}{
		{"ethertype guess", [][]byte{frame}, 0, 1},
		{"guess and a frame cut in its RETH", [][]byte{frame, frame[:60]}, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "f.pcap")
			writePcap(t, file, c.frames)
			m, ib := interop.TsharkMalformed(t, file)
			if m < 0 {
				t.Skip("tshark not installed")
			}
			if m != c.malformed || ib != c.ibN {
				t.Errorf("TsharkMalformed = %d malformed, %d InfiniBand; want %d, %d", m, ib, c.malformed, c.ibN)
			}
		})
	}
}

func writePcap(t *testing.T, file string, frames [][]byte) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, b := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, 0), CaptureLength: len(b), Length: len(b)}
		if err := w.WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTsharkFrames: one pass counts the frames holding each protocol, as the
// siw checks need (a capture of Debian's ib_write_bw -R between siw peers).
func TestTsharkFrames(t *testing.T) {
	s := interop.TsharkFrames(t, filepath.Join("..", "..", "testdata", "captures", "siw-write-bw.pcap"))
	if s.Protocols == nil {
		t.Skip("tshark not installed")
	}
	want := tsharkWant{Malformed: 0, MPA: 51, DDP: 47}
	if got := (tsharkWant{s.Malformed, s.Protocols["iwarp_mpa"], s.Protocols["iwarp_ddp_rdmap"]}); got != want {
		t.Errorf("TsharkFrames = %+v, want %+v", got, want)
	}
}

type tsharkWant struct{ Malformed, MPA, DDP int }
