package pingpong

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/softrdma/softrdma/counters"
)

// TestWriteReport: the --json object is the result's fields and "counters"
// holding only the devices on the run's address (LocalAddr), an empty list
// (not null) when none is; an error result keeps its "error".
func TestWriteReport(t *testing.T) {
	s := counters.Snapshot{Devices: []counters.Device{
		{Name: "a", Address: "127.0.0.1"}, {Name: "b", Address: "127.0.0.2"}, {Name: "c", Address: "127.0.0.1"},
	}}
	for _, tt := range []struct {
		res  Result
		want []string
	}{
		{Result{Mode: "rc", LocalAddr: "127.0.0.1", Iters: 3}, []string{"a", "c"}},
		{Result{Mode: "ud", LocalAddr: "127.0.0.9", Error: "boom"}, []string{}},
	} {
		var b bytes.Buffer
		if err := WriteReport(&b, tt.res, s); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Mode     string `json:"mode"`
			Iters    int    `json:"iters"`
			Error    string `json:"error"`
			Counters struct {
				Devices []struct{ Name string } `json:"devices"`
			} `json:"counters"`
		}
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", b.String(), err)
		}
		names := []string{}
		for _, d := range got.Counters.Devices {
			names = append(names, d.Name)
		}
		if got.Mode != tt.res.Mode || got.Iters != tt.res.Iters || got.Error != tt.res.Error || len(names) != len(tt.want) ||
			(len(names) > 0 && (names[0] != tt.want[0] || names[len(names)-1] != tt.want[len(tt.want)-1])) {
			t.Errorf("WriteReport(%+v) = %s; want devices %v", tt.res, b.String(), tt.want)
		}
		if got.Counters.Devices == nil {
			t.Errorf("counters.devices is null, want []: %s", b.String())
		}
	}
}
