package pingpong

import (
	"encoding/json"
	"io"

	"github.com/softrdma/softrdma/counters"
)

// Report is pingpong --json's object: the result, and the counters of the
// run's device as softrdma stat --json and perf --report-counters give them
// (per device and per QP, NAKs by code, drops by reason), beside the
// result's device_counters, the RoCE device's own frame counts.
type Report struct {
	Result
	Counters counters.Snapshot `json:"counters"`
}

// WriteReport writes res as pingpong --json's Report (indented), with the
// devices of s on res.LocalAddr, the run's device: a process that runs
// several commands (a test) has every one's in the registry.
func WriteReport(w io.Writer, res Result, s counters.Snapshot) error {
	devs := []counters.Device{}
	for _, d := range s.Devices {
		if d.Address == res.LocalAddr {
			devs = append(devs, d)
		}
	}
	s.Devices = devs
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&Report{Result: res, Counters: s})
}
