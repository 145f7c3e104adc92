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

// rxDirectMin is the shortest remainder of a payload that readSocket reads
// straight into its memory; shorter ones go through the buffer.
const rxDirectMin = rxBufSize

// readSocket fills p from the socket, the read-ahead buffer being empty, with
// readv(2) into {p, a pooled buffer} (or the buffer alone for short p, then
// copied): a payload lands in its memory (one copy, the kernel's) and what
// follows it on the stream (the trailer, the next FPDUs) lands in the buffer
// in the same system call. The buffer is taken from the pool inside the
// RawConn.Read callback and given back there if the socket had nothing for it,
// so that a reader waiting on the poller holds none. RawConn.Read honours the
// connection's deadlines.
func (r *rxState) readSocket(p []byte) error {
	if r.readv == nil {
		// Made once: a closure per call was an allocation per large FPDU.
		r.readv = func(fd uintptr) bool {
			if r.buf == nil {
				r.take()
			}
			r.iov[1] = r.buf[:r.ahead]
			iov := r.iov[:]
			if r.iov[0] == nil {
				iov = iov[1:]
			}
			for {
				r.readvN, r.readvErr = unix.Readv(int(fd), iov)
				if r.readvErr != unix.EINTR {
					break
				}
			}
			if r.readvErr != nil || r.readvN <= len(r.iov[0]) {
				r.release() // nothing reached the buffer
			}
			return r.readvErr != unix.EAGAIN
		}
	}
	got := 0
	for len(p) > 0 {
		direct := len(p) >= rxDirectMin
		r.iov[0] = nil
		if direct {
			r.iov[0] = p
		}
		rerr := r.rc.Read(r.readv)
		r.iov[0], r.iov[1] = nil, nil
		if rerr != nil {
			r.release()
			return rerr
		}
		n, err := r.readvN, r.readvErr
		if err != nil {
			return err
		}
		if n == 0 {
			if got > 0 {
				return io.ErrUnexpectedEOF
			}
			return io.EOF
		}
		got += n
		r.reads.Add(1)
		k := 0
		if direct {
			k = min(n, len(p))
			if r.obs != nil {
				r.obs.Received(p[:k])
			}
			p = p[k:]
		}
		if n > k {
			r.r, r.w = 0, n-k
			if r.obs != nil {
				r.obs.Received(r.buf[:r.w])
			}
			c := copy(p, r.buf[:r.w])
			r.r = c
			p = p[c:]
		}
	}
	if r.r == r.w {
		r.release()
	}
	return nil
}
