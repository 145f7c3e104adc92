package device

import (
	"github.com/softrdma/softrdma/counters"
)

// counterInfo names d in counters: the spec's name if it has one (a
// SOFTRDMA_DEVICES or config device), else the interface the tools show.
func counterInfo(d Device) counters.Info {
	s := d.Spec()
	name := s.Name
	if name == "" {
		name = d.Name()
	}
	return counters.Info{Name: name, Transport: string(s.Transport), Address: d.Local()}
}

// register puts d in counters.Default (softrdma stat, --metrics) until it
// closes: the returned function, which Close calls, keeps its last counts.
func register(d Device) func() {
	switch d := d.(type) {
	case *RoCE:
		return counters.Default.Register(func() counters.Device {
			c := d.dev.Counters()
			return counters.Collect(counterInfo(d), d.Context(), &c)
		})
	case *IWARP:
		return counters.Default.Register(func() counters.Device {
			return counters.Collect(counterInfo(d), d.Context(), nil)
		})
	}
	return func() {}
}
