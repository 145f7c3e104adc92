package ibcm

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/internal/pcaptest"
	"github.com/softrdma/softrdma/roce"
)

// readCapture and captureNames read the reference captures (testdata/captures).
var (
	readCapture  = pcaptest.Frames
	captureNames = pcaptest.Names
)

// roceFrames returns the decoded RoCE frames of a capture.
func roceFrames(tb testing.TB, name string) []roce.Frame {
	tb.Helper()
	var out []roce.Frame
	for i, b := range readCapture(tb, name) {
		var f roce.Frame
		err := f.DecodeEthernet(b)
		if errors.Is(err, roce.ErrNotRoCE) {
			continue
		}
		if err != nil {
			tb.Fatalf("%s frame %d: %v", name, i+1, err)
		}
		out = append(out, f)
	}
	return out
}

var logQPNRe = regexp.MustCompile(`local address:.*QPN (0x[0-9a-fA-F]+)`)

// logQPNs returns the client's and the server's QPN from logs/NAME.log (0, 0 if
// the log has none, as rping's).
func logQPNs(t *testing.T, capture string) (client, server uint32) {
	data, err := os.ReadFile(filepath.Join(pcaptest.Dir(), "logs", strings.TrimSuffix(capture, ".pcap")+".log"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	ci := strings.Index(text, "## client output")
	si := strings.Index(text, "## server output")
	if ci < 0 || si < 0 {
		t.Fatal("log has no client/server sections")
	}
	parse := func(s string) uint32 {
		m := logQPNRe.FindStringSubmatch(s)
		if m == nil {
			return 0
		}
		v, err := strconv.ParseUint(m[1], 0, 32)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(v)
	}
	if ci < si {
		return parse(text[ci:si]), parse(text[si:])
	}
	return parse(text[ci:]), parse(text[si:ci])
}
