package decode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
)

// htmlReport decodes capture with Options.Report and returns the result and its report.
func htmlReport(t *testing.T, capture []byte, filter *Filter) (Result, string) {
	t.Helper()
	res, _, err := decodeBytes(t, capture, Options{Flows: true, Summary: true, Report: true, Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, &res, "test"); err != nil {
		t.Fatal(err)
	}
	return res, b.String()
}

// reportCaptures are the captures the report tests draw: good RoCE and iWARP, one with
// retransmissions, NAKs, a gap and corruption (made below), and the merged one.
func reportCaptures(t *testing.T) map[string][]byte {
	write := readFrames(t, readFile(t, filepath.Join(captureDir, "rxe-write-bw.pcap")))
	// Frame 22 lost, frame 23 then sent twice, frame 28 (an ACK) a NAK, frame 21 corrupted.
	var bad []frameOut
	bad = append(bad, write[:21]...)
	bad = append(bad, write[22], write[21], write[22])
	bad = append(bad, write[23:]...)
	bad[20].data = append([]byte(nil), bad[20].data...)
	bad[20].data[len(bad[20].data)-6] ^= 0x20
	return map[string][]byte{
		"rxe-read-bw":   readFile(t, filepath.Join(captureDir, "rxe-read-bw.pcap")),
		"siw-crc-rping": readFile(t, filepath.Join(captureDir, "siw-crc-rping.pcap")),
		"merged":        mergedCapture(t),
		"rxe bad":       writeCapture(t, bad, layers.LinkTypeEthernet, false),
	}
}

// TestHTMLReport: the report is one self-contained page (no resource from elsewhere),
// with per flow its verdict table and plots: a PSN-over-time plot per requesting
// direction of a RoCE flow (its points: every packet sent, retransmitted, ACK, NAK),
// the payload plot of an iWARP flow, throughput bars, and the RTT histogram.
func TestHTMLReport(t *testing.T) {
	external := regexp.MustCompile(`(?i)<link|<img|<iframe|\bsrc=|href="(https?:)?//|url\(|@import|https?://`)
	for name, capture := range reportCaptures(t) {
		res, page := htmlReport(t, capture, nil)
		if m := external.FindAllString(strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, ""), -1); len(m) > 0 {
			t.Errorf("%s: refers to resources elsewhere: %q", name, m)
		}
		if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.HasSuffix(page, "</html>\n") {
			t.Errorf("%s: not a whole page", name)
		}
		for _, f := range res.Flows {
			if !strings.Contains(page, fmt.Sprintf(`<h2 id="flow-%d">Flow #%d: `, f.ID, f.ID)) {
				t.Errorf("%s: no section for flow #%d", name, f.ID)
			}
		}
		plots := strings.Count(page, `<svg class="plot"`)
		want := 0
		for _, f := range res.Flows {
			if f.Throughput != nil {
				want++
			}
			if f.RTT != nil {
				want++
			}
		}
		if plots <= want {
			t.Errorf("%s: %d plots, want more than %d (throughput and RTT) for the PSN/payload plots", name, plots, want)
		}
		if name != "rxe bad" {
			continue
		}
		// The PSN plot of the WRITE direction: 18 sent (20, less the one lost and the
		// corrupted one, which is not counted), 2 retransmitted (PSN 7564823, then 7564824
		// again), 5 ACKs; the verdict table names the gap (7564822 corrupted, 7564823
		// not yet there when 7564824 came: 2 PSNs) and the ICRC error.
		for _, s := range []string{"sent 18", "retransmitted 2", "ACK 5", `<tr class="bad"><th>PSN gaps</th><td>1 (2 PSNs missing)</td></tr>`,
			`<tr class="bad"><th>ICRC errors</th><td>1</td></tr>`, "frame 21: icrc"} {
			if !strings.Contains(page, s) {
				t.Errorf("%s: report lacks %q", name, s)
			}
		}
		if n := strings.Count(page, `data-t="retransmitted `); n != 2 {
			t.Errorf("%s: %d retransmission markers, want 2", name, n)
		}
	}
}

// TestHTMLChromium opens reports in headless Chromium (Debian's chromium, which
// scripts/deps.sh installs): the DOM it renders has every plot with marks in it, the
// page's script ran to its end (its marker), and the console shows no script error.
func TestHTMLChromium(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("chromium not on PATH (scripts/deps.sh installs Debian's chromium)")
	}
	dir := t.TempDir()
	for name, capture := range reportCaptures(t) {
		_, page := htmlReport(t, capture, nil)
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".html")
		if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--user-data-dir="+filepath.Join(dir, "profile"), "--enable-logging=stderr", "--v=0", "--dump-dom", "file://"+file)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		dom, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: chromium: %v\n%s", name, err, stderr.String())
		}
		plots := strings.Count(page, `<svg class="plot"`)
		body := regexp.MustCompile(`<body[^>]*>`).FindString(string(dom))
		want := fmt.Sprintf(`<body data-plots="%d" data-drawn="%d" data-rendered="softrdma-report-ok">`, plots, plots)
		if body != want {
			t.Errorf("%s: rendered %q, want %q", name, body, want)
		}
		if n := strings.Count(string(dom), "<svg "); n != plots {
			t.Errorf("%s: %d svg elements in the DOM, %d in the page", name, n, plots)
		}
		if strings.Contains(stderr.String(), "Uncaught") {
			t.Errorf("%s: script error: %s", name, stderr.String())
		}
	}
}
