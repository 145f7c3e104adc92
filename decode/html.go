package decode

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/softrdma/softrdma/ibtransport"
)

// maxPlotPoints bounds the points of one kind a plot draws: more are thinned evenly
// (retransmissions, NAKs and RNR NAKs are always all drawn).
const maxPlotPoints = 4000

// WriteHTML writes one self-contained HTML page (inline CSS, SVG and script; nothing
// loaded from elsewhere) reporting a decoded capture: the file's verdict and, per flow,
// a PSN-over-time plot in the manner of tcptrace's time-sequence graph (requests sent,
// retransmissions, ACKs, NAKs and RNR NAKs marked; for iWARP the payload each way),
// the throughput over time, the RTT distribution and the verdict table. res must come
// from a Run with Options.Report (else the plots are empty); name titles the page.
func WriteHTML(w io.Writer, res *Result, name string) error {
	var b strings.Builder
	title := "softrdma decode: " + name
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%s</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #bbb;padding:2px 8px;text-align:left;font-size:90%%}
.ok{background:#e6f4e6}.bad{background:#fbe3e3}.warn{background:#fff3d6}
svg.plot{border:1px solid #ccc;margin:.3em .6em .3em 0;background:#fff}
.plots{display:flex;flex-wrap:wrap}
.legend span{margin-right:1em;font-size:85%%}
#tip{position:fixed;pointer-events:none;background:#333;color:#fff;padding:2px 5px;font-size:80%%;display:none}
</style></head><body>
<h1>%s</h1>
`, html.EscapeString(title), html.EscapeString(title))
	verdict, cls := "all RDMA frames well formed, every CRC verified", "ok"
	if len(res.Errors) > 0 {
		verdict, cls = fmt.Sprintf("%d errors", len(res.Errors)), "bad"
	}
	b.WriteString("<table>\n")
	row(&b, "", "capture", fmt.Sprintf("%d frames (%s), %d RDMA frames, %d RDMA packets", res.Frames, res.Format, res.RDMAFrames, res.Packets))
	if res.Filter != "" {
		row(&b, "warn", "filter", res.Filter+": the totals, problems and flows are those of the packets shown")
	}
	row(&b, cls, "verdict", verdict)
	row(&b, okIf(res.CRCErrors == 0), "ICRC / MPA CRC errors", fmt.Sprint(res.CRCErrors))
	row(&b, okIf(res.Cut == 0), "frames cut by the snap length", fmt.Sprint(res.Cut))
	for i, p := range res.Errors {
		if i == 50 {
			row(&b, "bad", "…", fmt.Sprintf("%d more errors", len(res.Errors)-50))
			break
		}
		row(&b, "bad", "error", p.Error())
	}
	for i, p := range res.Notes {
		if i == 50 {
			break
		}
		row(&b, "warn", "note", p.Error())
	}
	b.WriteString("</table>\n")
	for i := range res.Flows {
		writeFlowHTML(&b, &res.Flows[i], res.series[res.Flows[i].ID])
	}
	b.WriteString(`<div id="tip"></div>
<script>
(function(){
  var tip=document.getElementById('tip');
  var plots=document.querySelectorAll('svg.plot');
  var drawn=0;
  plots.forEach(function(svg){
    if(svg.querySelector('circle,rect,path,line'))drawn++;
    svg.querySelectorAll('[data-t]').forEach(function(el){
      el.addEventListener('mouseenter',function(e){tip.textContent=el.getAttribute('data-t');tip.style.display='block';tip.style.left=(e.clientX+10)+'px';tip.style.top=(e.clientY+10)+'px';});
      el.addEventListener('mouseleave',function(){tip.style.display='none';});
    });
  });
  document.body.setAttribute('data-plots',String(plots.length));
  document.body.setAttribute('data-drawn',String(drawn));
  document.body.setAttribute('data-rendered','softrdma-report-ok');
})();
</script>
</body></html>
`)
	_, err := io.WriteString(w, b.String())
	return err
}

func okIf(ok bool) string {
	if ok {
		return "ok"
	}
	return "bad"
}

func row(b *strings.Builder, cls, k, v string) {
	fmt.Fprintf(b, "<tr class=\"%s\"><th>%s</th><td>%s</td></tr>\n", cls, html.EscapeString(k), html.EscapeString(v))
}

func writeFlowHTML(b *strings.Builder, f *FlowSummary, s *flowSeries) {
	kind := f.Transport
	if f.Service != "" {
		kind += " " + f.Service
	}
	fmt.Fprintf(b, "<h2 id=\"flow-%d\">Flow #%d: %s %s ↔ %s</h2>\n", f.ID, f.ID, html.EscapeString(kind), html.EscapeString(f.A.String()), html.EscapeString(f.B.String()))
	b.WriteString("<table>\n")
	row(b, "", "packets, bytes", fmt.Sprintf("%d packets, %d bytes, %.6f–%.6f s", f.Packets, f.Bytes, f.First, f.Last))
	row(b, "", "goodput", fmt.Sprintf("%d bytes (%s)", f.GoodputBytes, rate(f.GoodputBPS)))
	row(b, "", "opcodes", sortedCounts(f.Opcodes))
	row(b, "", "messages", sortedCounts(f.Messages))
	if f.Transport == "iWARP" {
		row(b, okIf(f.Duplicates == 0), "TCP retransmissions", fmt.Sprint(f.Duplicates))
		row(b, okIf(f.LostBytes == 0), "bytes the capture lost", fmt.Sprint(f.LostBytes))
		row(b, okIf(f.CRCErrors == 0), "MPA CRC errors", fmt.Sprint(f.CRCErrors))
		row(b, okIf(f.Terminates == 0), "Terminates", fmt.Sprint(f.Terminates))
	} else {
		row(b, okIf(f.PSNGaps == 0), "PSN gaps", fmt.Sprintf("%d (%d PSNs missing)", f.PSNGaps, f.PSNsMissing))
		row(b, okIf(f.Duplicates == 0), "duplicates (retransmissions)", fmt.Sprint(f.Duplicates))
		row(b, "", "ACKs", fmt.Sprint(f.ACKs))
		row(b, okIf(len(f.NAKs) == 0), "NAKs", sortedCounts(f.NAKs))
		row(b, okIf(f.RNRNAKs == 0), "RNR NAKs", fmt.Sprint(f.RNRNAKs))
		row(b, okIf(f.ICRCErrors == 0), "ICRC errors", fmt.Sprint(f.ICRCErrors))
	}
	row(b, okIf(f.Errors == 0), "errors", fmt.Sprint(f.Errors))
	if r := f.RTT; r != nil {
		for _, x := range []struct {
			n string
			s *RTTStats
		}{{"RTT request→ACK", r.RequestACK}, {"RTT READ request→response", r.ReadResponse}} {
			if x.s != nil {
				row(b, "", x.n, fmt.Sprintf("%d samples: min %s, median %s, p99 %s, max %s", x.s.Samples, seconds(x.s.Min), seconds(x.s.Median), seconds(x.s.P99), seconds(x.s.Max)))
			}
		}
	}
	b.WriteString("</table>\n<div class=\"plots\">\n")
	if s != nil {
		if f.Transport == "iWARP" {
			iwarpPlot(b, f, s)
		} else {
			psnPlots(b, f, s)
		}
	}
	if f.Throughput != nil {
		throughputPlot(b, f.Throughput)
	}
	if s != nil {
		rttPlot(b, s)
	}
	b.WriteString("</div>\n")
}

// plotArea maps data coordinates into an SVG of fixed size.
type plotArea struct {
	b                       *strings.Builder
	x0, x1, y0, y1          float64
	w, h, left, bottom, top float64
}

func newPlot(b *strings.Builder, title, xlabel, ylabel string, x0, x1, y0, y1 float64) *plotArea {
	if x1 <= x0 {
		x1 = x0 + 1e-6
	}
	if y1 <= y0 {
		y1 = y0 + 1
	}
	p := &plotArea{b: b, x0: x0, x1: x1, y0: y0, y1: y1, w: 560, h: 300, left: 70, bottom: 40, top: 24}
	fmt.Fprintf(b, "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n", p.w, p.h, p.w, p.h)
	fmt.Fprintf(b, "<text x=\"%.0f\" y=\"16\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", p.left, html.EscapeString(title))
	fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#444\"/>\n", p.left, p.h-p.bottom, p.w-10, p.h-p.bottom)
	fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#444\"/>\n", p.left, p.top, p.left, p.h-p.bottom)
	for i := 0; i <= 4; i++ {
		xv, yv := x0+(x1-x0)*float64(i)/4, y0+(y1-y0)*float64(i)/4
		x, y := p.x(xv), p.y(yv)
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">%s</text>\n", x, p.h-p.bottom+14, axisLabel(xv))
		fmt.Fprintf(b, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s</text>\n", p.left-4, y+3, axisLabel(yv))
		fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", p.left, y, p.w-10, y)
	}
	fmt.Fprintf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", (p.left+p.w)/2, p.h-6, html.EscapeString(xlabel))
	fmt.Fprintf(b, "<text x=\"12\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 12 %.0f)\">%s</text>\n", p.h/2, p.h/2, html.EscapeString(ylabel))
	return p
}

func (p *plotArea) x(v float64) float64 {
	return p.left + (v-p.x0)/(p.x1-p.x0)*(p.w-10-p.left)
}

func (p *plotArea) y(v float64) float64 {
	return p.h - p.bottom - (v-p.y0)/(p.y1-p.y0)*(p.h-p.bottom-p.top)
}

func (p *plotArea) end() { p.b.WriteString("</svg>\n") }

func axisLabel(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1e9:
		return fmt.Sprintf("%.3gG", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case a >= 1:
		return fmt.Sprintf("%.4g", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// marker draws one point: a dot, a cross, a triangle or a tick.
func (p *plotArea) marker(shape, color string, xv, yv float64, tip string) {
	x, y := p.x(xv), p.y(yv)
	t := html.EscapeString(tip)
	switch shape {
	case "x":
		fmt.Fprintf(p.b, "<path d=\"M%.1f %.1fl6 6m0-6l-6 6\" stroke=\"%s\" stroke-width=\"2\" data-t=\"%s\"/>\n", x-3, y-3, color, t)
	case "tri":
		fmt.Fprintf(p.b, "<path d=\"M%.1f %.1fl4 7h-8z\" fill=\"%s\" data-t=\"%s\"/>\n", x, y-4, color, t)
	case "tick":
		fmt.Fprintf(p.b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" data-t=\"%s\"/>\n", x-3, y, x+3, y, color, t)
	default:
		fmt.Fprintf(p.b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"1.8\" fill=\"%s\" data-t=\"%s\"/>\n", x, y, color, t)
	}
}

func legend(b *strings.Builder, items ...string) {
	b.WriteString("<div class=\"legend\">")
	for i := 0; i+1 < len(items); i += 2 {
		fmt.Fprintf(b, "<span style=\"color:%s\">■ %s</span>", items[i], html.EscapeString(items[i+1]))
	}
	b.WriteString("</div>\n")
}

// psnPlots draws, for each direction of the flow that sends requests, its request PSNs
// over time (relative to its first) with the other direction's ACKs, NAKs, RNR NAKs and
// READ responses at the PSNs they answer.
func psnPlots(b *strings.Builder, f *FlowSummary, s *flowSeries) {
	for i, req := range s.dirs {
		base, ok := uint32(0), false
		for _, e := range req.events {
			if e.kind == evRequest || e.kind == evRetx {
				base, ok = e.psn, true
				break
			}
		}
		if !ok {
			continue
		}
		type pt struct {
			t, psn float64
			kind   uint8
		}
		var pts []pt
		rel := func(psn uint32) float64 { return float64(ibtransport.PSNDiff(psn, base)) }
		for _, e := range req.events {
			if e.kind == evRequest || e.kind == evRetx {
				pts = append(pts, pt{e.t, rel(e.psn), e.kind})
			}
		}
		for j, other := range s.dirs {
			if j == i || len(s.dirs) > 2 && !strings.HasPrefix(other.name, dirDst(req.name)) {
				continue
			}
			for _, e := range other.events {
				switch e.kind {
				case evACK, evNAK, evRNR, evReadResp:
					pts = append(pts, pt{e.t, rel(e.psn), e.kind})
				}
			}
		}
		x0, x1, y0, y1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		counts := map[uint8]int{}
		for _, p := range pts {
			x0, x1, y0, y1 = min(x0, p.t), max(x1, p.t), min(y0, p.psn), max(y1, p.psn)
			counts[p.kind]++
		}
		p := newPlot(b, "PSN over time: "+req.name, "time (s)", "PSN − "+fmt.Sprint(base), x0, x1, y0, y1)
		fmt.Fprintf(b, "<g data-series=\"psn\">\n")
		seen := map[uint8]int{}
		for _, q := range pts {
			n := counts[q.kind]
			seen[q.kind]++
			if n > maxPlotPoints && q.kind != evRetx && q.kind != evNAK && q.kind != evRNR && seen[q.kind]%((n+maxPlotPoints-1)/maxPlotPoints) != 0 {
				continue
			}
			tip := fmt.Sprintf("%.6f s PSN %d", q.t, int64(q.psn)+int64(base))
			switch q.kind {
			case evRequest:
				p.marker("dot", "#1f5fbf", q.t, q.psn, "sent "+tip)
			case evRetx:
				p.marker("dot", "#d62728", q.t, q.psn, "retransmitted "+tip)
			case evACK:
				p.marker("tick", "#2ca02c", q.t, q.psn, "ACK "+tip)
			case evReadResp:
				p.marker("tick", "#17becf", q.t, q.psn, "READ response "+tip)
			case evNAK:
				p.marker("x", "#ff7f0e", q.t, q.psn, "NAK "+tip)
			case evRNR:
				p.marker("tri", "#9467bd", q.t, q.psn, "RNR NAK "+tip)
			}
		}
		b.WriteString("</g>\n")
		p.end()
		legend(b, "#1f5fbf", fmt.Sprintf("sent %d", counts[evRequest]), "#d62728", fmt.Sprintf("retransmitted %d", counts[evRetx]),
			"#2ca02c", fmt.Sprintf("ACK %d", counts[evACK]), "#17becf", fmt.Sprintf("READ response %d", counts[evReadResp]),
			"#ff7f0e", fmt.Sprintf("NAK %d", counts[evNAK]), "#9467bd", fmt.Sprintf("RNR NAK %d", counts[evRNR]))
	}
}

// dirDst returns the destination address of a direction named "SRC → DST QP ...".
func dirDst(name string) string {
	_, after, _ := strings.Cut(name, " → ")
	dst, _, _ := strings.Cut(after, " ")
	return dst + " "
}

// iwarpPlot draws the payload delivered each way over time, cumulated (tcptrace's
// sequence graph, in message payload bytes).
func iwarpPlot(b *strings.Builder, f *FlowSummary, s *flowSeries) {
	if len(s.iwarpPts) == 0 {
		return
	}
	var total [2]float64
	x0, x1, y1 := math.Inf(1), math.Inf(-1), 0.0
	for _, q := range s.iwarpPts {
		total[q.dir] += float64(q.payload)
		x0, x1, y1 = min(x0, q.t), max(x1, q.t), max(y1, total[q.dir])
	}
	p := newPlot(b, "payload over time (cumulative)", "time (s)", "bytes", x0, x1, 0, y1)
	colors := [2]string{"#1f5fbf", "#2ca02c"}
	total = [2]float64{}
	step := (len(s.iwarpPts) + maxPlotPoints - 1) / maxPlotPoints
	b.WriteString("<g data-series=\"iwarp\">\n")
	for i, q := range s.iwarpPts {
		total[q.dir] += float64(q.payload)
		if i%step == 0 {
			p.marker("dot", colors[q.dir], q.t, total[q.dir], fmt.Sprintf("%.6f s %s: %.0f bytes", q.t, s.dirs[q.dir].name, total[q.dir]))
		}
	}
	b.WriteString("</g>\n")
	p.end()
	legend(b, colors[0], s.dirs[0].name, colors[1], s.dirs[1].name)
}

// throughputPlot draws the goodput per interval as bars.
func throughputPlot(b *strings.Builder, t *Throughput) {
	top := 0.0
	for _, v := range t.BPS {
		top = max(top, v)
	}
	end := t.Start + float64(len(t.BPS))*t.Interval
	p := newPlot(b, "throughput per "+seconds(t.Interval), "time (s)", "bit/s", t.Start, end, 0, top)
	b.WriteString("<g data-series=\"throughput\">\n")
	for i, v := range t.BPS {
		x0, x1 := p.x(t.Start+float64(i)*t.Interval), p.x(t.Start+float64(i+1)*t.Interval)
		y := p.y(v)
		fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4c78a8\" data-t=\"%s\"/>\n",
			x0, y, max(x1-x0-1, 0.5), p.y(0)-y, html.EscapeString(fmt.Sprintf("%.6f s: %s", t.Start+float64(i)*t.Interval, rate(v))))
	}
	b.WriteString("</g>\n")
	p.end()
}

// rttPlot draws a histogram of the RTT samples (request→ACK and READ).
func rttPlot(b *strings.Builder, s *flowSeries) {
	all := append(append([]float64(nil), s.ackRTT...), s.readRTT...)
	if len(all) == 0 {
		return
	}
	sort.Float64s(all)
	lo, hi := all[0], all[len(all)-1]
	const bins = 30
	width := (hi - lo) / bins
	if width == 0 {
		width = max(lo*0.01, 1e-9)
	}
	var h [2][bins]int
	top := 0
	for k, xs := range [][]float64{s.ackRTT, s.readRTT} {
		for _, v := range xs {
			i := min(int((v-lo)/width), bins-1)
			h[k][i]++
			top = max(top, h[0][i]+h[1][i])
		}
	}
	p := newPlot(b, "RTT distribution", "RTT (s)", "samples", lo, lo+width*bins, 0, float64(top))
	b.WriteString("<g data-series=\"rtt\">\n")
	for i := 0; i < bins; i++ {
		x0, x1 := p.x(lo+float64(i)*width), p.x(lo+float64(i+1)*width)
		base := 0
		for k, color := range []string{"#2ca02c", "#17becf"} {
			n := h[k][i]
			if n == 0 {
				continue
			}
			yTop, yBase := p.y(float64(base+n)), p.y(float64(base))
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" data-t=\"%s\"/>\n", x0, yTop, max(x1-x0-1, 0.5), yBase-yTop, color,
				html.EscapeString(fmt.Sprintf("%s–%s: %d", seconds(lo+float64(i)*width), seconds(lo+float64(i+1)*width), n)))
			base += n
		}
	}
	b.WriteString("</g>\n")
	p.end()
	legend(b, "#2ca02c", fmt.Sprintf("request→ACK %d", len(s.ackRTT)), "#17becf", fmt.Sprintf("READ request→response %d", len(s.readRTT)))
}
