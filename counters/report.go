package counters

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Dump writes s where a command's --dump-counters NAME says, when the
// command ends: "-" is stderr (WriteText's lines), a NAME ending in .json
// gets WriteJSON, any other WriteText. The file is created (or truncated);
// an error names neither the flag nor the file's use, which the caller does.
func Dump(name string, stderr io.Writer, s Snapshot) error {
	if name == "-" {
		return WriteText(stderr, s)
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if strings.HasSuffix(name, ".json") {
		err = WriteJSON(f, s)
	} else {
		err = WriteText(f, s)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteReport writes s after a command's result: the line "counters:" and
// WriteText's lines, or, after a --json result, a second JSON document
// {"counters": S} (a stream that jq and json.Decoder read).
func WriteReport(w io.Writer, asJSON bool, s Snapshot) error {
	if !asJSON {
		if _, err := fmt.Fprintln(w, "counters:"); err != nil {
			return err
		}
		return WriteText(w, s)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Counters Snapshot `json:"counters"`
	}{s})
}

// FetchAnnounced fetches the counters of every process announced in dir
// (Announced), each cut to the devices only names (Snapshot.Only). A process
// that does not answer is passed to skipped and left out; an unreadable dir
// is the error.
func FetchAnnounced(ctx context.Context, dir string, only []string, skipped func(Endpoint, error)) ([]Snapshot, error) {
	eps, err := Announced(dir)
	if err != nil {
		return nil, err
	}
	var snaps []Snapshot
	for _, ep := range eps {
		s, err := Fetch(ctx, ep.Addr)
		if err != nil {
			skipped(ep, err)
			continue
		}
		snaps = append(snaps, s.Only(only))
	}
	return snaps, nil
}

// WriteProcesses writes the snapshots of several processes, as softrdma
// stat prints them: as JSON, one document {"processes": [S...]}; as text,
// for each a line "process PID COMMAND" (if it came from an endpoint that
// says its PID) and WriteText's lines.
func WriteProcesses(w io.Writer, asJSON bool, snaps []Snapshot) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Processes []Snapshot `json:"processes"`
		}{snaps})
	}
	for _, s := range snaps {
		if s.PID != 0 {
			fmt.Fprintf(w, "process %d %s\n", s.PID, s.Command)
		}
		if err := WriteText(w, s); err != nil {
			return err
		}
	}
	return nil
}
