package ibtransport_test

import (
	"errors"
	"io"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestMRReadAt: MR.ReadAt reads the region's bytes as io.ReaderAt does: a
// short read at the end with io.EOF, io.EOF at or past the end, and an error
// for a negative offset.
func TestMRReadAt(t *testing.T) {
	p := newRC(t)
	buf := []byte{10, 11, 12, 13, 14, 15}
	mr := regMR(t, p.A.PD, buf, ib.AccessLocalWrite)
	for _, c := range []struct {
		off     int64
		n       int
		want    []byte
		wantErr error
	}{
		{off: 0, n: 6, want: buf},
		{off: 2, n: 2, want: []byte{12, 13}},
		{off: 4, n: 4, want: []byte{14, 15}, wantErr: io.EOF},
		{off: 6, n: 1, want: []byte{}, wantErr: io.EOF},
		{off: 100, n: 1, want: []byte{}, wantErr: io.EOF},
		{off: -1, n: 1, want: []byte{}, wantErr: ib.ErrInvalidArgument},
	} {
		got := make([]byte, c.n)
		n, err := mr.ReadAt(got, c.off)
		if !errors.Is(err, c.wantErr) || string(got[:n]) != string(c.want) {
			t.Errorf("ReadAt(%d bytes, %d) = %v, %v; want %v, %v", c.n, c.off, got[:n], err, c.want, c.wantErr)
		}
	}
}
