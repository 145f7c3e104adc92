package netio

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCaptureWriterPcapNG writes a pcapng file with what only pcapng holds
// (application name, section and packet comments, two link types) and has
// tshark read it back: every frame with its length, link type and comment.
func TestCaptureWriterPcapNG(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed: nothing independent to read the file back")
	}
	var out bytes.Buffer
	w, err := NewCaptureWriterConfig(&out, CaptureConfig{Format: FormatPcapNG, Application: "softrdma test",
		Comments: []string{"a section comment"}})
	if err != nil {
		t.Fatal(err)
	}
	eth := testFrame(1, 100)
	raw := testFrame(2, 60)[EthernetHeaderLen:] // an IPv4 packet, LINKTYPE_RAW
	ts := time.Unix(1, 500)
	if err := w.WritePacket(ts, LinkTypeEthernet, eth, len(eth), []string{"first frame"}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrame(ts.Add(time.Microsecond), eth); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(ts.Add(2*time.Microsecond), LinkTypeRaw, raw, len(raw)+10, []string{"raw, cut"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "c.pcapng")
	if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tshark, "-r", file, "-T", "fields", "-E", "separator=;", "-e", "frame.number",
		"-e", "frame.len", "-e", "frame.cap_len", "-e", "frame.encap_type", "-e", "frame.comment")
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark -r: %v\n%s", err, got)
	}
	want := []string{
		"1;" + itoa(len(eth)) + ";" + itoa(len(eth)) + ";1;first frame",
		"2;" + itoa(len(eth)) + ";" + itoa(len(eth)) + ";1;",
		"3;" + itoa(len(raw)+10) + ";" + itoa(len(raw)) + ";7;raw, cut",
	}
	if lines := strings.Split(strings.TrimSpace(string(got)), "\n"); strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("tshark read:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// A pcap file holds one link type.
	pw, err := NewCaptureWriter(&bytes.Buffer{}, FormatPcap)
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.WritePacket(ts, LinkTypeRaw, raw, len(raw), nil); err == nil {
		t.Error("a raw IP packet was written into an Ethernet pcap file")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestFormatForPath: .pcapng (any case) is pcapng, anything else pcap.
func TestFormatForPath(t *testing.T) {
	for path, want := range map[string]CaptureFormat{
		"x.pcapng": FormatPcapNG, "/tmp/A.PCAPNG": FormatPcapNG, "x.pcap": FormatPcap, "x": FormatPcap, "x.pcapng.gz": FormatPcap,
	} {
		if got := FormatForPath(path); got != want {
			t.Errorf("FormatForPath(%q) = %v, want %v", path, got, want)
		}
	}
}
