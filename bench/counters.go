package bench

import (
	"fmt"
	"net/netip"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// envCounters makes e.devices give the counters of e's two engines (A's,
// then B's) as package counters takes them, the one snapshot softrdma stat,
// --dump-counters and perf --report-counters give: links are the RoCE
// devices (nil for iWARP, whose engines have no frame counts of their own).
// The names are TRANSPORT-BACKEND-MTU-a and -b (without the MTU if 0).
func (e *env) envCounters(ctxs [2]*ibtransport.Context, addrs [2]netip.Addr, links [2]*roce.Device) {
	e.devices = func(mtu int) []counters.Device {
		devs := make([]counters.Device, 2)
		for i := range devs {
			name := fmt.Sprintf("%s-%s-%d-%c", e.transport, e.backend, mtu, 'a'+i)
			if mtu == 0 { // the debug dump's
				name = fmt.Sprintf("%s-%s-%c", e.transport, e.backend, 'a'+i)
			}
			info := counters.Info{
				Name:      name,
				Transport: e.transport,
				Address:   addrs[i],
			}
			var link *roce.DeviceCounters
			if links[i] != nil {
				c := links[i].Counters()
				link = &c
			}
			devs[i] = counters.Collect(info, ctxs[i], link)
		}
		return devs
	}
}
