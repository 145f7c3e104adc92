package pcaptap

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/roce"
)

// ReadRoCEFrames reads a classic pcap file of RoCE frames (a --pcap file of
// pingpong or perf over RoCE) and decodes each; a frame that is not RoCE is
// an error naming its index.
func ReadRoCEFrames(name string) ([]roce.Frame, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var frames []roce.Frame
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		var f roce.Frame
		if err := f.DecodeEthernet(data); err != nil {
			return nil, fmt.Errorf("%s frame %d: %w", name, len(frames), err)
		}
		frames = append(frames, f)
	}
}
