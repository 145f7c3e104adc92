package counters_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/softrdma/softrdma/counters"
)

// FuzzParsePrometheus: any input parses or fails with an error, never a
// panic; what parses writes out and parses back to the same snapshot.
func FuzzParsePrometheus(f *testing.F) {
	f.Add("softrdma_device_info{device=\"a\",transport=\"roce\",address=\"127.0.0.1\",state=\"active\"} 1\n" +
		"softrdma_device_packets_out_total{device=\"a\",transport=\"roce\",address=\"127.0.0.1\"} 7\n" +
		"softrdma_qp_info{device=\"a\",transport=\"roce\",address=\"127.0.0.1\",qpn=\"17\",type=\"RC\",state=\"RTS\",dest_qpn=\"18\"} 1\n" +
		"softrdma_qp_drops_total{device=\"a\",transport=\"roce\",address=\"127.0.0.1\",qpn=\"17\",reason=\"out_of_sequence\"} 2\n")
	f.Add("# HELP x y\ngo_goroutines 7\nsoftrdma_link_frames_in_total{device=\"a\\\"b\\\\c\\n\"} 3 1700000000\n")
	f.Add("softrdma_process_info{pid=\"12\",command=\"softrdma perf\"} 1\n")
	f.Add("softrdma_device_timeouts_total{device=\"a\" 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := counters.ParsePrometheus(bytes.NewReader([]byte(in)))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := counters.WritePrometheus(&b, s); err != nil {
			t.Fatal(err)
		}
		back, err := counters.ParsePrometheus(&b)
		if err != nil {
			t.Fatalf("what WritePrometheus wrote does not parse: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(normal(back), normal(s)) {
			t.Errorf("round trip:\n%+v\nwant\n%+v", back, s)
		}
	})
}

// normal is s as WritePrometheus would write it twice: devices of one
// name, transport and address merged (the input may name one twice).
func normal(s counters.Snapshot) counters.Snapshot {
	var b bytes.Buffer
	counters.WritePrometheus(&b, s)
	back, _ := counters.ParsePrometheus(&b)
	return back
}
