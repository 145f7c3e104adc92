package netio

import (
	"testing"
	"time"
)

func TestManualClock(t *testing.T) {
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		op   func(c *ManualClock)
		want time.Time
	}{
		{"start", func(*ManualClock) {}, start},
		{"advance", func(c *ManualClock) { c.Advance(1500 * time.Millisecond) }, start.Add(1500 * time.Millisecond)},
		{"advance twice", func(c *ManualClock) { c.Advance(time.Second); c.Advance(time.Nanosecond) }, start.Add(time.Second + time.Nanosecond)},
		{"set back", func(c *ManualClock) { c.Advance(time.Hour); c.Set(start.Add(-time.Minute)) }, start.Add(-time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(start)
			tt.op(c)
			if got := c.Now(); !got.Equal(tt.want) {
				t.Fatalf("Now() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestManualClockAdvanceReturnsNow(t *testing.T) {
	var c ManualClock
	if !c.Now().IsZero() {
		t.Fatalf("zero ManualClock reads %v, want zero time", c.Now())
	}
	got := c.Advance(time.Minute)
	if !got.Equal(c.Now()) || !got.Equal(time.Time{}.Add(time.Minute)) {
		t.Fatalf("Advance returned %v, Now %v", got, c.Now())
	}
}

func TestSystemClockMoves(t *testing.T) {
	var c Clock = SystemClock{}
	a := c.Now()
	b := c.Now()
	if b.Before(a) {
		t.Fatalf("SystemClock went backwards: %v then %v", a, b)
	}
}
