// Package sim is a deterministic, seeded network simulator with a virtual clock:
// links with delay, bandwidth, loss, reordering, duplication, corruption and partitions.
//
// A Network holds nodes' Ports (each a netio.Endpoint and netio.Poller),
// point-to-point Links and learning Switches. Time is virtual: an event
// queue ordered by (time, sequence number) holds frame deliveries and
// timers, and the clock jumps from one event to the next, so a simulated
// minute of traffic takes milliseconds and every run with the same seed and
// the same calls is identical.
//
// # Building a network
//
//	n := sim.New(1)
//	a := n.AddNode("a", [6]byte{2, 0, 0, 0, 0, 1})
//	b := n.AddNode("b", [6]byte{2, 0, 0, 0, 0, 2})
//	link := n.Connect(a, b, sim.LinkConfig{Latency: time.Millisecond, Loss: 0.01})
//	n.CaptureLink(link, f) // optional pcap of everything delivered
//
// For more than two nodes, AddSwitch and ConnectSwitch each node to it.
//
// # Stepping a device deterministically
//
// The caller owns the loop and no goroutines are needed. A device (a
// sans-I/O QP engine, say) is given the Port and n.Clock(). It sends with
// port.Write, which enqueues onto the link at the current virtual time and
// never blocks; it takes delivered frames with port.TryRead, which returns
// 0, nil when there are none; and it registers each deadline it cares about
// (retransmission, ACK coalescing, RNR) with n.AddTimer, stopping the Timer
// when the deadline is cancelled. Then:
//
//	a.OnReceive(devA.Poll) // Poll: TryRead everything, process, Write replies
//	b.OnReceive(devB.Poll)
//	devA.Start()           // e.g. posts work requests and Writes
//	for n.Step() {         // or n.RunUntil(deadline)
//	}
//
// Each Step fires one event: a delivery queues a frame on its destination
// Port and calls that Port's OnReceive function; a timer calls its
// function. When Step returns false nothing is in flight and no timer is
// pending: the run is over. Instead of OnReceive, a driver may equally poll
// every device after each Step.
//
// # Real goroutines
//
// Devices with their own goroutines may block in Port.Read; something must
// then drive the Network. Either a goroutine calls Step in a loop, or
// RunRealtime(ctx) runs the virtual clock in step with the wall clock.
//
// # Faults
//
// LinkConfig gives each direction latency, jitter, bandwidth with a bounded
// transmit queue, an MTU, random and Gilbert–Elliott burst loss, reordering,
// duplication and single-bit corruption, plus DropFunc and DelayFunc
// callbacks for exact control. Link.SetDown and Network.Partition cut
// traffic; LinkStats counts every outcome per direction and reason.
package sim
