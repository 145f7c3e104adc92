package decode

import (
	"fmt"
	"io"
	"strings"

	"github.com/softrdma/softrdma/netio"
)

// Annotate writes the capture r to w as pcapng with softrdma's verdicts as packet
// comments, so that Wireshark shows them: every frame of r, in order, with its
// timestamp, lengths and link type; each RDMA packet's verdict (res.Verdicts, from a Run
// of the same capture with Options.Verdicts) as a comment of the frame it was printed
// for; each problem of a frame that no verdict carries (a frame cut inside its headers,
// a link type not supported) and each note as a comment too. The problems of the file
// itself (frame 0: a file cut short) are comments of the section header and of the last
// frame. r must hold the same bytes that res was decoded from.
func Annotate(r io.Reader, w io.Writer, res *Result) error {
	src, err := openCapture(r)
	if err != nil {
		return err
	}
	comments := map[int][]string{}
	for _, v := range res.Verdicts {
		comments[v.Frame] = append(comments[v.Frame], v.Text)
	}
	var fileProblems []string
	addProblem := func(p Problem, kind string) {
		if p.Frame == 0 {
			fileProblems = append(fileProblems, "softrdma: file: "+kind+p.Reason)
			return
		}
		// A problem the frame's verdicts already state (a packet's note or error).
		for _, text := range comments[p.Frame] {
			if strings.Contains(text, p.Reason) {
				return
			}
		}
		comments[p.Frame] = append(comments[p.Frame], "softrdma: "+kind+p.Reason)
	}
	for _, p := range res.Errors {
		addProblem(p, "ERROR: ")
	}
	for _, p := range res.Notes {
		addProblem(p, "note: ")
	}
	nw, err := netio.NewCaptureWriterConfig(w, netio.CaptureConfig{Format: netio.FormatPcapNG, SnapLen: maxSnaplen,
		Application: "softrdma decode --annotate", Comments: fileProblems})
	if err != nil {
		return err
	}
	frame := 0
	for {
		data, ci, link, err := src.next()
		if err != nil {
			break // the end, or damage Run found too: a problem of the file (frame 0)
		}
		frame++
		c := comments[frame]
		if frame == res.Frames {
			c = append(c, fileProblems...)
		}
		if err := nw.WritePacket(ci.Timestamp, netio.LinkType(link), data, ci.Length, c); err != nil {
			return err
		}
	}
	if err := nw.Flush(); err != nil {
		return err
	}
	if frame != res.Frames {
		return fmt.Errorf("capture has %d frames, the decoded one %d: not the same capture", frame, res.Frames)
	}
	return nil
}
