package roce

import "time"

// Run's run to completion (rtc.go), for tests that drive its steps.

// LoopPlan is Run's loop's plan.
type LoopPlan = loopPlan

// Planned records the loop's plan: deadline t (ok false: none).
func (p *LoopPlan) Planned(t time.Time, ok bool) { p.planned(t, ok) }

// Planning marks the loop as reading the deadlines.
func (p *LoopPlan) Planning() { p.planning() }

// BeginBatch is the reader's start of a batch of n frames.
func (d *Device) BeginBatch(n int) bool { return d.beginBatch(n) }

// InputDone is the reader's end of a batch that BeginBatch held; later is
// the loop's deferred kick (outputDefer).
func (d *Device) InputDone(now time.Time, p *LoopPlan, kick, later func()) {
	d.inputDone(now, p, kick, later)
}

// LockFlush takes the lock a Flush holds through its system call, as Run's
// loop does while it sends; UnlockFlush releases it.
func (d *Device) LockFlush()   { d.mu.Lock() }
func (d *Device) UnlockFlush() { d.mu.Unlock() }

// SetRunWaitHook sets the Context's wait hook Run sets, with the plan p and
// the loop's kick kick.
func (d *Device) SetRunWaitHook(p *LoopPlan, kick func()) {
	d.ctx.SetWaitHook(func() { d.waitFlush(time.Now(), p, kick) })
}

// SetRunPostHook sets the Context's post hook Run sets, with the plan p and
// the loop's kick kick.
func (d *Device) SetRunPostHook(p *LoopPlan, kick func()) {
	d.ctx.SetPostHook(func() { d.postFlush(time.Now(), p, kick) })
}
