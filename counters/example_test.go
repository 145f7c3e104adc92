package counters_test

import (
	"net/netip"
	"os"

	"github.com/softrdma/softrdma/counters"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// Collect takes a device's counters from its engine (and, for RoCE, from
// the device: roce.Device.Counters); WriteText writes them as softrdma stat
// does. Here two engines on the test wire exchange one SEND of 64 bytes.
func ExampleCollect() {
	p, _ := ibtest.NewPair(ib.ContextConfig{Seed: 1}, ib.QPTypeRC, ibtest.DefaultConnOptions())
	src, _ := p.A.PD.RegMR(make([]byte, 64), ib.AccessLocalWrite)
	dst, _ := p.B.PD.RegMR(make([]byte, 64), ib.AccessLocalWrite)
	p.B.QP.PostRecv(ib.RecvWR{SGL: []ib.SGE{dst.SGE(0, 64)}})
	p.A.QP.PostSend(ib.SendWR{Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 64)}, Signaled: true})
	p.Completions(p.A.CQ, 1)

	a := counters.Collect(counters.Info{Name: "a", Transport: "roce", Address: netip.MustParseAddr("127.0.0.1")}, p.A.Ctx, nil)
	a.QPs = nil // the device line only
	counters.WriteText(os.Stdout, counters.Snapshot{Devices: []counters.Device{a}})
	// Output:
	// link a/1 transport roce address 127.0.0.1 state active packets_out 1 bytes_out 76 packets_in 1 bytes_in 16 retransmissions 0 timeouts 0 probes 0 acks_sent 0 acks_received 1 rnr_naks_sent 0 rnr_naks_received 0 duplicate_requests 0 duplicate_responses 0 terminates_sent 0 terminates_received 0
}
