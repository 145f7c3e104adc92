package ibtransport

import (
	"math/rand/v2"
	"testing"
)

// TestPendingReadLikeCount: the count of queued READ/atomic responses that
// MaxDestRdAtomic bounds (pendingReadLike, kept as responses are queued and
// sent) equals a count over the queue after every push and pop, for random
// mixes of ACKs, NAKs, READ, empty READ and atomic responses, duplicates
// among them, and through the queue emptying and being reused.
func TestPendingReadLikeCount(t *testing.T) {
	qp := &QP{ctx: &Context{}}
	r := &qp.resp
	recount := func() int {
		n := 0
		for _, it := range r.items[r.itemHead:] {
			if it.kind != respAck && it.kind != respNAK && !it.dup {
				n++
			}
		}
		return n
	}
	kinds := []respKind{respAck, respNAK, respRead, respReadEmpty, respAtomic}
	rng := rand.New(rand.NewPCG(22, 1))
	for step := range 5000 {
		if r.pending() > 0 && rng.IntN(2) == 0 {
			r.popResp()
		} else {
			qp.pushResp(respItem{kind: kinds[rng.IntN(len(kinds))], dup: rng.IntN(3) == 0})
		}
		if got, want := r.pendingReadLike(), recount(); got != want {
			t.Fatalf("step %d: pendingReadLike %d, %d in the queue", step, got, want)
		}
	}
	r.reset()
	if got := r.pendingReadLike(); got != 0 {
		t.Fatalf("after reset: pendingReadLike %d", got)
	}
}
