package decode

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// decodeCapture decodes a capture of testdata/captures with flows and summary, as text
// or JSON.
func decodeCapture(t *testing.T, name string, asJSON bool) (Result, string) {
	t.Helper()
	res, out, err := decodeBytes(t, readFile(t, filepath.Join(captureDir, name)), Options{JSON: asJSON, Flows: true, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	return res, out
}

// frameLine returns the output line (text or JSON) of the packet in frame, or "".
func frameLine(out string, frame int, asJSON bool) string {
	for _, l := range strings.Split(out, "\n") {
		if asJSON {
			if strings.HasPrefix(l, `{"frame":`+itoa(frame)+`,`) {
				return l
			}
			continue
		}
		if f := strings.Fields(l); len(f) > 0 && f[0] == itoa(frame) {
			return l
		}
	}
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestRoCEPacketLines: whole packet lines, text and JSON, of an RC RDMA WRITE First (with
// its RETH), an RDMA READ Request, an ACK and a UD SEND from the captures. Every value
// was read off tshark -V for the same frames: frame.time_relative (the time column),
// BTH opcode, destination QP, PSN and AckReq, RETH virtual address, R_Key and DMA length,
// AETH syndrome 31 (ACK, no credit count) and MSN, DETH Q_Key and source QP, and the
// payload length ("Data (N bytes)").
func TestRoCEPacketLines(t *testing.T) {
	for _, tc := range []struct {
		file       string
		frame      int
		text, json string
	}{
		{"rxe-write-bw.pcap", 20,
			"    20    1.054616 10.77.0.22 → 10.77.0.21 RoCEv2 RC RDMA WRITE First QP=0x000014 PSN=7564821 len=1024 RETH VA=0x55d4e68cb000 RKey=0x00000508 DMALen=4096",
			`{"frame":20,"time":1.054616,"src":"10.77.0.22","dst":"10.77.0.21","transport":"RoCEv2","opcode":"RC RDMA WRITE First","dest_qp":20,"psn":7564821,"ack_req":false,"payload_len":1024,"reth":{"va":94372889407488,"rkey":1288,"dma_len":4096},"icrc":"ok"}`},
		{"rxe-read-bw.pcap", 20,
			"    20    0.048485 10.77.0.22 → 10.77.0.21 RoCEv2 RC RDMA READ Request QP=0x000015 PSN=2540495 AckReq RETH VA=0x5642ed42a000 RKey=0x00000628 DMALen=4096",
			`{"frame":20,"time":0.048485,"src":"10.77.0.22","dst":"10.77.0.21","transport":"RoCEv2","opcode":"RC RDMA READ Request","dest_qp":21,"psn":2540495,"ack_req":true,"reth":{"va":94845448396800,"rkey":1576,"dma_len":4096},"icrc":"ok"}`},
		{"rxe-write-bw.pcap", 44,
			"    44    1.057866 10.77.0.21 → 10.77.0.22 RoCEv2 RC Acknowledge QP=0x000014 PSN=7564840 AETH ACK MSN=5",
			`{"frame":44,"time":1.057866,"src":"10.77.0.21","dst":"10.77.0.22","transport":"RoCEv2","opcode":"RC Acknowledge","dest_qp":20,"psn":7564840,"ack_req":false,"aeth":{"syndrome":"ACK","msn":5},"icrc":"ok"}`},
		{"rxe-ud-pingpong.pcap", 10,
			"    10    0.022573 10.77.0.22 → 10.77.0.21 RoCEv2 UD SEND only QP=0x000013 PSN=13414395 len=512 DETH QKey=0x11111111 SrcQP=0x000013",
			`{"frame":10,"time":0.022573,"src":"10.77.0.22","dst":"10.77.0.21","transport":"RoCEv2","opcode":"UD SEND only","dest_qp":19,"psn":13414395,"ack_req":false,"payload_len":512,"deth":{"qkey":286331153,"src_qp":19},"icrc":"ok"}`},
	} {
		_, text := decodeCapture(t, tc.file, false)
		if got := frameLine(text, tc.frame, false); got != tc.text {
			t.Errorf("%s frame %d:\n got %q\nwant %q", tc.file, tc.frame, got, tc.text)
		}
		_, js := decodeCapture(t, tc.file, true)
		if got := frameLine(js, tc.frame, true); got != tc.json {
			t.Errorf("%s frame %d JSON:\n got %s\nwant %s", tc.file, tc.frame, got, tc.json)
		}
	}
}

// TestCMLines: the five CM messages of rdma_cm over RoCE, whole lines. The communication
// IDs are tshark -V's: the REQ's Local Communication ID 0x20054e4f comes back as the
// REP's Remote Communication ID, the REP's Local 0xfcc6d299 as the RTU's Remote; the
// DREQ (from the REQ's side) and DREP (from the REP's side) carry the pair each way round.
// QPNs, starting PSNs (0x68f4fe, 0x6f92e1), the DREQ's remote QPN and the transaction ID
// are tshark's too; in JSON the IDs are numbers.
func TestCMLines(t *testing.T) {
	const prefix = " RoCEv2 UD SEND only CM "
	_, text := decodeCapture(t, "rxe-rdma-cm-rping.pcap", false)
	_, js := decodeCapture(t, "rxe-rdma-cm-rping.pcap", true)
	for _, tc := range []struct {
		frame      int
		text, json string
	}{
		{1, "     1    0.000000 10.77.0.22 → 10.77.0.21" + prefix + "REQ QP=0x000001 PSN=0 AckReq len=256 DETH QKey=0x80010000 SrcQP=0x000001 TID=0x24f4e0520 LocalCommID=0x20054e4f QPN=0x00001b StartingPSN=6878462 ServiceID=0x0000000001061c06 rdma_cm 10.77.0.22:47139 → 10.77.0.21:7174",
			`"cm":{"message":"REQ","name":"ConnectRequest","local_comm_id":537218639,"local_qpn":27,"starting_psn":6878462,"service_id":17177606,"rdma_cm":{"src":"10.77.0.22:47139","dst":"10.77.0.21:7174"}}`},
		{2, "     2    0.019099 10.77.0.21 → 10.77.0.22" + prefix + "REP QP=0x000001 PSN=0 AckReq len=256 DETH QKey=0x80010000 SrcQP=0x000001 TID=0x24f4e0520 LocalCommID=0xfcc6d299 RemoteCommID=0x20054e4f QPN=0x00001b StartingPSN=7312097",
			`"cm":{"message":"REP","name":"ConnectReply","local_comm_id":4240888473,"remote_comm_id":537218639,"local_qpn":27,"starting_psn":7312097}`},
		{3, "     3    0.023791 10.77.0.22 → 10.77.0.21" + prefix + "RTU QP=0x000001 PSN=1 AckReq len=256 DETH QKey=0x80010000 SrcQP=0x000001 TID=0x24f4e0520 LocalCommID=0x20054e4f RemoteCommID=0xfcc6d299",
			`"cm":{"message":"RTU","name":"ReadyToUse","local_comm_id":537218639,"remote_comm_id":4240888473}`},
		{124, "   124    0.080947 10.77.0.22 → 10.77.0.21" + prefix + "DREQ QP=0x000001 PSN=2 AckReq len=256 DETH QKey=0x80010000 SrcQP=0x000001 TID=0x24f4e0520 LocalCommID=0x20054e4f RemoteCommID=0xfcc6d299 RemoteQPN=0x00001b",
			`"cm":{"message":"DREQ","name":"DisconnectRequest","local_comm_id":537218639,"remote_comm_id":4240888473,"remote_qpn":27}`},
		{125, "   125    0.084719 10.77.0.21 → 10.77.0.22" + prefix + "DREP QP=0x000001 PSN=1 AckReq len=256 DETH QKey=0x80010000 SrcQP=0x000001 TID=0x24f4e0520 LocalCommID=0xfcc6d299 RemoteCommID=0x20054e4f",
			`"cm":{"message":"DREP","name":"DisconnectReply","local_comm_id":4240888473,"remote_comm_id":537218639}`},
	} {
		if got := frameLine(text, tc.frame, false); got != tc.text {
			t.Errorf("frame %d:\n got %q\nwant %q", tc.frame, got, tc.text)
		}
		if got := frameLine(js, tc.frame, true); !strings.Contains(got, `"tid":9920447776,`+tc.json+`}}`) {
			t.Errorf("frame %d JSON %s lacks %s", tc.frame, got, tc.json)
		}
	}
}

// TestFlowTotals checks a flow's packets, bytes, first and last time and goodput against
// tshark. RoCE (rxe-write-bw, the RC QP pair 0x14 ↔ 0x14): 25 packets (conv,udp: 20 + 5
// frames), 22030 bytes (conv,udp's frame bytes: 5×1098 + 15×1082 + 5×62), from
// frame.time_relative 1.054616 to 1.057866, goodput 20480 bytes (the sum of data.len:
// 20 payloads of 1024). iWARP (siw-crc-rping): 72 TCP segments with data (tcp.len>0),
// 3848 bytes (their tcp.len summed: for iWARP the flow counts TCP payload, not frames),
// from 0.026844 to 0.255329, goodput 1920 bytes (data.len of the 70 DDP segments: 40
// Sends of 16, 10 Writes and 10 Read Responses of 64). The rate is goodput×8 over
// last−first, and the text summary prints all of it.
func TestFlowTotals(t *testing.T) {
	for _, tc := range []struct {
		file                 string
		packets, bytes, good int
		first, last          float64
		text                 string
	}{
		{"rxe-write-bw.pcap", 25, 22030, 20480, 1.054616, 1.057866,
			"  #1 RoCEv2 RC 10.77.0.21 QP 0x000014 ↔ 10.77.0.22 QP 0x000014: 25 packets, 22030 bytes, 1.054616-1.057866 s, goodput 20480 bytes (50.41 Mbit/s)\n"},
		{"siw-crc-rping.pcap", 72, 3848, 1920, 0.026844, 0.255329,
			"  #1 iWARP 10.77.0.22:48943 ↔ 10.77.0.21:7174: 72 packets, 3848 bytes, 0.026844-0.255329 s, goodput 1920 bytes (67.23 kbit/s)\n"},
	} {
		res, out := decodeCapture(t, tc.file, false)
		if len(res.Flows) != 1 {
			t.Fatalf("%s: %d flows", tc.file, len(res.Flows))
		}
		f := res.Flows[0]
		bps := float64(tc.good) * 8 / (tc.last - tc.first)
		if f.Packets != tc.packets || f.Bytes != tc.bytes || f.GoodputBytes != tc.good ||
			math.Abs(f.First-tc.first) > 1e-9 || math.Abs(f.Last-tc.last) > 1e-9 || math.Abs(f.GoodputBPS-bps) > 1e-3*bps {
			t.Errorf("%s: packets %d bytes %d goodput %d (%.0f bit/s) first %.9f last %.9f; want %d %d %d (%.0f) %.6f %.6f",
				tc.file, f.Packets, f.Bytes, f.GoodputBytes, f.GoodputBPS, f.First, f.Last, tc.packets, tc.bytes, tc.good, bps, tc.first, tc.last)
		}
		if !strings.Contains(out, "\nFlows:\n"+tc.text) {
			t.Errorf("%s: flow line missing:\n%s\nin\n%s", tc.file, tc.text, out[strings.Index(out, "Flows:"):])
		}
	}
}
