//go:build linux

package iwarp

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawReader returns the connection's syscall.RawConn for readv, if it has one.
func rawReader(nc net.Conn) syscall.RawConn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// readDirect fills p straight from the socket with readv(2) into {p, the empty
// read-ahead buffer}: the payload lands in its memory (one copy, the kernel's) and
// what follows it on the stream (the trailer, the next FPDU's header) lands in
// the buffer in the same system call, which halves the reads per FPDU compared
// with io.ReadFull followed by a buffered read. RawConn.Read waits on the poller
// and honours the connection's deadlines.
func (r *rxState) readDirect(p []byte) error {
	if r.readv == nil {
		// Made once: a closure per call was an allocation per large FPDU.
		r.readv = func(fd uintptr) bool {
			for {
				r.readvN, r.readvErr = unix.Readv(int(fd), r.iov[:])
				if r.readvErr != unix.EINTR {
					return r.readvErr != unix.EAGAIN
				}
			}
		}
	}
	for len(p) > 0 {
		r.iov[0], r.iov[1] = p, r.buf
		if rerr := r.rc.Read(r.readv); rerr != nil {
			return rerr
		}
		n, err := r.readvN, r.readvErr
		r.iov[0] = nil
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		k := min(n, len(p))
		if r.obs != nil {
			r.obs.Received(p[:k])
		}
		p = p[k:]
		if n > k {
			r.r, r.w = 0, n-k
			if r.obs != nil {
				r.obs.Received(r.buf[:r.w])
			}
		}
	}
	return nil
}
