package decode

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// framesReader is a FrameReader over frames read from a capture: what a
// live capture of them would read, then io.EOF.
type framesReader struct {
	frames []frameOut
	next   int
}

func (r *framesReader) ReadFrame() ([]byte, time.Time, int, error) {
	if r.next == len(r.frames) {
		return nil, time.Time{}, 0, io.EOF
	}
	f := r.frames[r.next]
	r.next++
	return f.data, f.ci.Timestamp, f.ci.Length, nil
}

func (r *framesReader) TryReadFrame() ([]byte, time.Time, int, bool, error) {
	return nil, time.Time{}, 0, false, nil
}

func (r *framesReader) SetReadDeadline(time.Time) error { return nil }

// TestLiveFilter: --flow ADDR, --flow ADDR:PORT and --qp on a live capture
// show the packets that the same filter shows on a file of the same frames
// (the merged capture: a UD CM flow, two RC flows whose QP pairs the CM gives,
// an iWARP connection), with the summary of the same flows; --flow N, a
// number given when the capture ends, is refused.
func TestLiveFilter(t *testing.T) {
	capture := mergedCapture(t)
	frames := readFrames(t, capture)
	for _, f := range []Filter{
		{Flows: []string{"10.77.0.21:7174"}},
		{Flows: []string{"10.77.0.22"}},
		{Flows: []string{"10.77.0.99"}},
		{QPs: []uint32{0x1c}}, // one end of flow #2: its other direction by the CM
		{QPs: []uint32{0x1d}},
		{QPs: []uint32{1}},
		{QPs: []uint32{0x1c, 0x1d}, Opcodes: []string{"acknowledge"}},
		{Flows: []string{"10.77.0.21"}, QPs: []uint32{0x1d}},
	} {
		t.Run(f.String(), func(t *testing.T) {
			var file, live bytes.Buffer
			fres, err := Run(bytes.NewReader(capture), &file, Options{Summary: true, Flows: true, Filter: &f})
			if err != nil {
				t.Fatal(err)
			}
			lres, err := RunLive(context.Background(), &framesReader{frames: frames}, &live, Options{Summary: true, Flows: true, Filter: &f}, LiveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The same output but for the format the summary names.
			if strings.Replace(live.String(), " frames (live), ", " frames (pcap), ", 1) != file.String() {
				t.Errorf("live:\n%s\nfile:\n%s", live.String(), file.String())
			}
			if lres.Packets != fres.Packets || len(lres.Flows) != len(fres.Flows) {
				t.Errorf("live: %d packets, %d flows; file: %d packets, %d flows", lres.Packets, len(lres.Flows), fres.Packets, len(fres.Flows))
			}
			if fres.Packets == 0 && !slices.Contains(f.Flows, "10.77.0.99") {
				t.Errorf("the filter shows no packet of the file")
			}
		})
	}
	_, err := RunLive(context.Background(), &framesReader{frames: frames}, io.Discard, Options{Filter: &Filter{Flows: []string{"2"}}}, LiveOptions{})
	if err == nil || !strings.Contains(err.Error(), "--flow ADDR") {
		t.Errorf("--flow 2 live: %v, want a refusal naming --flow ADDR", err)
	}
}
