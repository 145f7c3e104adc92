package main

import (
	"errors"
	"testing"
)

// TestCoveredBy: a region is pinnable when /proc/self/maps's mappings cover
// it without a hole, readable, and writable when the region may be written.
func TestCoveredBy(t *testing.T) {
	const maps = "1000-3000 rw-p 00000000 00:00 0 \n" +
		"3000-4000 r--p 00000000 00:00 0 [ro]\n" +
		"4000-5000 ---p 00000000 00:00 0 \n" +
		"6000-8000 rw-s 00000000 00:05 7 /dev/zero\n"
	for _, c := range []struct {
		name      string
		addr, end uint64
		write     bool
		pinned    bool
	}{
		{"inside one mapping", 0x1100, 0x1200, true, true},
		{"across rw and r-- for reading", 0x2000, 0x3800, false, true},
		{"across rw and r-- for writing", 0x2000, 0x3800, true, false},
		{"a PROT_NONE page", 0x3800, 0x4800, false, false},
		{"a hole", 0x5000, 0x6800, false, false},
		{"before every mapping", 0x0800, 0x1800, false, false},
		{"past the last mapping", 0x7000, 0x9000, false, false},
		{"a shared mapping's end", 0x6000, 0x8000, true, true},
	} {
		err := coveredBy([]byte(maps), c.addr, c.end, c.write)
		if (err == nil) != c.pinned || (err != nil && !errors.Is(err, errNotPinned)) {
			t.Errorf("%s: [%x, %x) write %v: %v, want pinned %v", c.name, c.addr, c.end, c.write, err, c.pinned)
		}
	}
	if err := checkPinnable(^uint64(0)-10, 100, false); !errors.Is(err, errRangeWraps) {
		t.Errorf("a range that wraps: %v", err)
	}
}
