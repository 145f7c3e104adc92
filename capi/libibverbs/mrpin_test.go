package main

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"unsafe"
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

// TestQueryCovered: PROCMAP_QUERY's answer for real mappings (a read-write
// page, a read-only one, a PROT_NONE one, a hole) is the maps text's.
func TestQueryCovered(t *testing.T) {
	pg := uint64(os.Getpagesize())
	m, err := syscall.Mmap(-1, 0, int(4*pg), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	base := uint64(uintptr(unsafe.Pointer(&m[0])))
	// rw- | r-- | --- | hole
	if err := syscall.Mprotect(m[pg:2*pg], syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(m[2*pg:3*pg], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_MUNMAP, uintptr(base+3*pg), uintptr(pg), 0); e != 0 {
		t.Fatal(e)
	}
	for _, c := range []struct {
		name       string
		from, to   uint64 // pages
		write, pin bool
	}{
		{"read-write page, writable", 0, 1, true, true},
		{"rw- and r-- for reading", 0, 2, false, true},
		{"rw- and r-- for writing", 0, 2, true, false},
		{"PROT_NONE", 2, 3, false, false},
		{"the hole", 3, 4, false, false},
	} {
		err, ok := queryCovered(base+c.from*pg, base+c.to*pg, c.write)
		if !ok {
			t.Skip("no PROCMAP_QUERY (Linux before 6.11)")
		}
		maps, rerr := os.ReadFile("/proc/self/maps")
		if rerr != nil {
			t.Fatal(rerr)
		}
		text := coveredBy(maps, base+c.from*pg, base+c.to*pg, c.write)
		if (err == nil) != c.pin || (text == nil) != c.pin {
			t.Errorf("%s: PROCMAP_QUERY %v, maps text %v, want pinned %v", c.name, err, text, c.pin)
		}
	}
}
