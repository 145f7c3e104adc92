package ibtransport_test

import (
	"fmt"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// Example shows the shape of a device loop around two Contexts: Output fills a
// batch, the "network" (here a direct hand-over) delivers each packet with Input,
// and NextDeadline says when the timers need the next call. A real loop sleeps on
// Wake, its socket and a timer for NextDeadline.
func Example() {
	a, _ := ibtest.NewEndpoint(ib.ContextConfig{Seed: 1}, ib.QPTypeRC)
	b, _ := ibtest.NewEndpoint(ib.ContextConfig{Seed: 2}, ib.QPTypeRC)
	if err := ibtest.Connect(a.QP, b.QP, ibtest.DefaultConnOptions()); err != nil {
		panic(err)
	}
	buf := make([]byte, 64)
	mr, _ := b.PD.RegMR(buf, ib.AccessLocalWrite)
	_ = b.QP.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{mr.SGE(0, 64)}})
	_ = a.QP.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, Inline: true, InlineData: []byte("hello, verbs"), Signaled: true})

	now := time.Unix(0, 0)
	batch := ib.NewOutputBatch(32, 42, 4) // room for Ethernet+IPv4+UDP before, ICRC after
	move := func(from, to *ib.Context) {
		batch.Reset()
		from.Output(now, batch)
		for i := range batch.Packets {
			_ = to.Input(now, batch.Packets[i].Packet(), ib.InputMeta{})
		}
	}
	var wc [1]ib.WC
	for b.CQ.Poll(wc[:]) == 0 {
		move(a.Ctx, b.Ctx)
		move(b.Ctx, a.Ctx)
		if t, ok := a.Ctx.NextDeadline(); ok && b.CQ.Len() == 0 {
			now = t
		}
	}
	fmt.Printf("%s %d bytes: %q\n", wc[0].Opcode, wc[0].ByteLen, buf[:wc[0].ByteLen])
	// Output: IBV_WC_RECV 12 bytes: "hello, verbs"
}
