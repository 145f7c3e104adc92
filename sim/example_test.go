package sim_test

import (
	"fmt"
	"time"

	"github.com/softrdma/softrdma/sim"
)

// pinger is a toy sans-I/O device: it sends numbered requests, retransmits
// on a timer until each is answered, and counts what it saw.
type pinger struct {
	n       *sim.Network
	port    *sim.Port
	peer    [6]byte
	next    byte
	retry   *sim.Timer
	retries int
	bufs    [][]byte
	sizes   []int
}

func (p *pinger) send() {
	f := make([]byte, 60)
	copy(f[0:6], p.peer[:])
	copy(f[6:12], p.port.HardwareAddr())
	f[14] = p.next
	p.port.Write([][]byte{f}, 0)
	// Register the retransmission deadline as an event.
	p.retry = p.n.AfterFunc(10*time.Millisecond, func() { p.retries++; p.send() })
}

// poll takes every delivered frame; it is the port's OnReceive function.
func (p *pinger) poll() {
	for {
		k, _ := p.port.TryRead(p.bufs, p.sizes, 0)
		if k == 0 {
			return
		}
		for i := 0; i < k; i++ {
			if p.bufs[i][14] == p.next { // the answer to the current request
				p.retry.Stop()
				p.next++
				if p.next < 5 {
					p.send()
				}
			}
		}
	}
}

// echo answers every frame on port, swapping the MAC addresses.
func echo(port *sim.Port) func() {
	bufs, sizes := [][]byte{make([]byte, 1514)}, []int{0}
	return func() {
		for {
			k, _ := port.TryRead(bufs, sizes, 0)
			if k == 0 {
				return
			}
			f := bufs[0][:sizes[0]]
			var dst [6]byte
			copy(dst[:], f[6:12])
			copy(f[6:12], f[0:6])
			copy(f[0:6], dst[:])
			port.Write([][]byte{f}, 0)
		}
	}
}

// Example shows the deterministic driving loop: devices Write and TryRead
// on their Ports, register deadlines with AfterFunc, and the caller steps
// the network until nothing is left to do.
func Example() {
	n := sim.New(7)
	a := n.AddNode("client", [6]byte{2, 0, 0, 0, 0, 1})
	b := n.AddNode("server", [6]byte{2, 0, 0, 0, 0, 2})
	link := n.Connect(a, b, sim.LinkConfig{Latency: time.Millisecond, Loss: 0.3})

	p := &pinger{n: n, port: a, peer: b.MAC(), bufs: [][]byte{make([]byte, 1514)}, sizes: []int{0}}
	a.OnReceive(p.poll)
	b.OnReceive(echo(b))
	p.send()
	for n.Step() {
	}

	fmt.Printf("answered %d requests with %d retransmissions by %v\n",
		p.next, p.retries, n.Now().Sub(sim.Epoch))
	st := link.Stats(sim.AtoB)
	fmt.Printf("client->server: sent %d, delivered %d, lost %d\n", st.Sent, st.Delivered, st.Dropped[sim.DropLoss])
	// Output:
	// answered 5 requests with 4 retransmissions by 50ms
	// client->server: sent 9, delivered 5, lost 4
}
