package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Why a region cannot be registered, as ib_umem_get (drivers/infiniband/core/umem.c)
// answers: a range that wraps around is -EINVAL; pages that cannot be pinned
// (not mapped, not readable, or read-only for a writable region: pin_user_pages
// with FOLL_WRITE) are -EFAULT.
var (
	errRangeWraps = errors.New("the range wraps around the address space")
	errNotPinned  = errors.New("pages the kernel could not pin")
)

// checkPinnable checks that [addr, addr+n) is memory the kernel's ibv_reg_mr
// would pin: every page mapped and readable, and writable when write is set.
// The engine uses the program's memory in place, so a region over a hole or
// a read-only page would fault the process when a peer's WRITE or READ
// reached it; the kernel refuses such a region at registration, and so does
// the library. The mappings are /proc/self/maps's.
func checkPinnable(addr, n uint64, write bool) error {
	end := addr + n
	if end < addr {
		return fmt.Errorf("address 0x%x length %d: %w", addr, n, errRangeWraps)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil // nothing known: the kernel-less default is to trust the program
	}
	return coveredBy(maps, addr, end, write)
}

// coveredBy reports whether the mappings of maps (/proc/self/maps lines,
// in address order) cover [addr, end) with read, and write if asked.
func coveredBy(maps []byte, addr, end uint64, write bool) error {
	at := addr
	for len(maps) > 0 && at < end {
		line := maps
		if i := bytes.IndexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		lo, hi, perms, ok := mapping(line)
		if !ok || hi <= at {
			continue
		}
		if lo > at {
			return fmt.Errorf("address 0x%x: not mapped: %w", at, errNotPinned)
		}
		if perms[0] != 'r' || (write && perms[1] != 'w') {
			return fmt.Errorf("address 0x%x: mapping %x-%x is %s (the region needs r%s): %w",
				at, lo, hi, perms, map[bool]string{true: "w", false: ""}[write], errNotPinned)
		}
		at = hi
	}
	if at < end {
		return fmt.Errorf("address 0x%x: not mapped: %w", at, errNotPinned)
	}
	return nil
}

// mapping parses "LO-HI PERMS ..." of a /proc/self/maps line.
func mapping(line []byte) (lo, hi uint64, perms string, ok bool) {
	dash := bytes.IndexByte(line, '-')
	sp := bytes.IndexByte(line, ' ')
	if dash < 0 || sp < dash || len(line) < sp+5 {
		return 0, 0, "", false
	}
	lo, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
	hi, err2 := strconv.ParseUint(string(line[dash+1:sp]), 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return lo, hi, string(line[sp+1 : sp+5]), true
}
