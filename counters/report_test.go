//go:build linux

package counters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/counters"
)

// reportSnap is a snapshot with one device, for the writers' tests.
var reportSnap = counters.Snapshot{PID: 7, Command: "perf", Devices: []counters.Device{{Name: "dev0"}}}

// TestDump: "-" is WriteText on stderr, NAME.json WriteJSON into NAME, any
// other NAME WriteText into it; a file that cannot be created is the error.
func TestDump(t *testing.T) {
	var text, js bytes.Buffer
	if err := counters.WriteText(&text, reportSnap); err != nil {
		t.Fatal(err)
	}
	if err := counters.WriteJSON(&js, reportSnap); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		file   string // "" for stderr
		want   string
		failed bool
	}{
		{name: "-", want: text.String()},
		{name: filepath.Join(dir, "c.txt"), file: filepath.Join(dir, "c.txt"), want: text.String()},
		{name: filepath.Join(dir, "c.json"), file: filepath.Join(dir, "c.json"), want: js.String()},
		{name: filepath.Join(dir, "no", "such", "dir"), failed: true},
	} {
		var stderr bytes.Buffer
		err := counters.Dump(tt.name, &stderr, reportSnap)
		if (err != nil) != tt.failed {
			t.Errorf("Dump(%s): error %v, want failure %v", tt.name, err, tt.failed)
			continue
		}
		if tt.failed {
			if stderr.Len() != 0 {
				t.Errorf("Dump(%s) failed and wrote %q on stderr", tt.name, stderr.String())
			}
			continue
		}
		got := stderr.String()
		if tt.file != "" {
			b, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			got = string(b)
			if stderr.Len() != 0 {
				t.Errorf("Dump(%s) wrote %q on stderr", tt.name, stderr.String())
			}
		}
		if got != tt.want {
			t.Errorf("Dump(%s) wrote\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}

// TestWriteReport: text is "counters:" then WriteText's lines; JSON is one
// document {"counters": S} that decodes back to S.
func TestWriteReport(t *testing.T) {
	var text, b bytes.Buffer
	if err := counters.WriteText(&text, reportSnap); err != nil {
		t.Fatal(err)
	}
	if err := counters.WriteReport(&b, false, reportSnap); err != nil {
		t.Fatal(err)
	}
	if want := "counters:\n" + text.String(); b.String() != want {
		t.Errorf("text report\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := counters.WriteReport(&b, true, reportSnap); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Counters counters.Snapshot }
	dec := json.NewDecoder(&b)
	if err := dec.Decode(&doc); err != nil || doc.Counters.PID != 7 || len(doc.Counters.Devices) != 1 || doc.Counters.Devices[0].Name != "dev0" {
		t.Errorf("JSON report decodes to %+v, %v", doc, err)
	}
	if dec.More() {
		t.Error("JSON report holds more than one document")
	}
}

// TestWriteProcesses: text gives "process PID COMMAND" before each snapshot
// that has a PID; JSON one document {"processes": [...]}.
func TestWriteProcesses(t *testing.T) {
	noPID := counters.Snapshot{Devices: []counters.Device{{Name: "dev1"}}}
	var b bytes.Buffer
	if err := counters.WriteProcesses(&b, false, []counters.Snapshot{reportSnap, noPID}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.HasPrefix(got, "process 7 perf\nlink dev0/1") || strings.Count(got, "process ") != 1 || !strings.Contains(got, "\nlink dev1/1") {
		t.Errorf("text:\n%s", got)
	}
	b.Reset()
	if err := counters.WriteProcesses(&b, true, []counters.Snapshot{reportSnap, noPID}); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Processes []counters.Snapshot }
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil || len(doc.Processes) != 2 || doc.Processes[0].PID != 7 || doc.Processes[1].Devices[0].Name != "dev1" {
		t.Errorf("JSON %s decodes to %+v, %v", b.String(), doc, err)
	}
}

// TestFetchAnnounced: the announced process that answers is fetched; one
// that does not (an address nobody serves) goes to skipped and is left out;
// no announce directory is no processes, no error.
func TestFetchAnnounced(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	dir := counters.AnnounceDir()
	if snaps, err := counters.FetchAnnounced(context.Background(), dir, nil, nil); err != nil || len(snaps) != 0 {
		t.Fatalf("no directory: %+v, %v; want none, nil", snaps, err)
	}
	srv, err := counters.Serve("0", &counters.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// PID 1 runs, and nothing serves port 1: it does not answer.
	if err := os.WriteFile(filepath.Join(dir, "1"), []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var skipped []int
	snaps, err := counters.FetchAnnounced(context.Background(), dir, []string{"x"}, func(ep counters.Endpoint, err error) {
		skipped = append(skipped, ep.PID)
	})
	if err != nil || len(snaps) != 1 || snaps[0].PID != os.Getpid() || snaps[0].Devices == nil {
		t.Errorf("FetchAnnounced = %+v, %v; want this process's snapshot", snaps, err)
	}
	if len(skipped) != 1 || skipped[0] != 1 {
		t.Errorf("skipped %v, want [1]", skipped)
	}
}
