package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"
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
	if err, ok := queryCovered(addr, end, write); ok {
		return err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil // nothing known: the kernel-less default is to trust the program
	}
	return coveredBy(maps, addr, end, write)
}

// procmapQuery is struct procmap_query (include/uapi/linux/fs.h, Linux 6.11):
// the PROCMAP_QUERY ioctl of /proc/PID/maps answers for one address with the
// mapping that covers it, without the text of every mapping (reading and
// parsing /proc/self/maps made ibv_reg_mr ~5 times slower).
type procmapQuery struct {
	Size, QueryFlags, QueryAddr, VMAStart, VMAEnd, VMAFlags, VMAPageSize, VMAOffset, Inode uint64
	DevMajor, DevMinor, VMANameSize, BuildIDSize                                           uint32
	VMANameAddr, BuildIDAddr                                                               uint64
}

const (
	procmapQueryIoctl = 0xC0686611 // _IOWR('f', 17, struct procmap_query)
	vmaReadable       = 0x01       // PROCMAP_QUERY_VMA_READABLE
	vmaWritable       = 0x02       // PROCMAP_QUERY_VMA_WRITABLE
)

// mapsFile is /proc/self/maps kept open for PROCMAP_QUERY, by the process
// that opened it (a forked child opens its own: the file names the mm of its
// opener).
var mapsFile struct {
	sync.Mutex
	f           *os.File
	pid         int
	unsupported bool // the kernel has no PROCMAP_QUERY (ENOTTY): read the text
}

// queryCovered is coveredBy through PROCMAP_QUERY; ok is false when the
// kernel does not have it.
func queryCovered(addr, end uint64, write bool) (err error, ok bool) {
	mapsFile.Lock()
	defer mapsFile.Unlock()
	if mapsFile.unsupported {
		return nil, false
	}
	if pid := os.Getpid(); mapsFile.f == nil || mapsFile.pid != pid {
		if mapsFile.f != nil {
			mapsFile.f.Close()
		}
		f, e := os.Open("/proc/self/maps")
		if e != nil {
			mapsFile.f = nil
			return nil, false
		}
		mapsFile.f, mapsFile.pid = f, pid
	}
	fd := mapsFile.f.Fd()
	for at := addr; at < end; {
		q := procmapQuery{Size: uint64(unsafe.Sizeof(procmapQuery{})), QueryAddr: at}
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, procmapQueryIoctl, uintptr(unsafe.Pointer(&q)))
		switch {
		case e == syscall.ENOENT:
			return fmt.Errorf("address 0x%x: not mapped: %w", at, errNotPinned), true
		case e == syscall.ENOTTY || e == syscall.EINVAL:
			mapsFile.unsupported = true
			return nil, false
		case e != 0:
			return nil, false
		case q.VMAFlags&vmaReadable == 0 || (write && q.VMAFlags&vmaWritable == 0):
			return fmt.Errorf("address 0x%x: mapping %x-%x is not %s: %w", at, q.VMAStart, q.VMAEnd,
				map[bool]string{true: "readable and writable", false: "readable"}[write], errNotPinned), true
		}
		at = q.VMAEnd
	}
	return nil, true
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
