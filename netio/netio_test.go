package netio

import (
	"errors"
	"testing"
)

func TestCopyFrame(t *testing.T) {
	frame := []byte{1, 2, 3, 4}
	tests := []struct {
		name    string
		bufLen  int
		offset  int
		want    int
		wantErr bool
	}{
		{"exact", 4, 0, 4, false},
		{"roomy", 10, 0, 4, false},
		{"headroom", 10, 6, 4, false},
		{"one short", 3, 0, 0, true},
		{"headroom eats room", 10, 7, 0, true},
		{"offset past end", 4, 5, 0, true},
		{"negative offset", 10, -1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, tt.bufLen)
			for i := range buf {
				buf[i] = 0xee
			}
			n, err := CopyFrame(buf, tt.offset, frame)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrShortBuffer) {
					t.Fatalf("err %v does not wrap ErrShortBuffer", err)
				}
				return
			}
			if n != tt.want {
				t.Fatalf("n = %d, want %d", n, tt.want)
			}
			for i := 0; i < tt.offset; i++ {
				if buf[i] != 0xee {
					t.Fatalf("headroom byte %d overwritten", i)
				}
			}
			if string(buf[tt.offset:tt.offset+n]) != string(frame) {
				t.Fatalf("copied %x, want %x", buf[tt.offset:tt.offset+n], frame)
			}
		})
	}
}

func TestMaxFrameLen(t *testing.T) {
	if got := MaxFrameLen(DefaultMTU); got != 1514 {
		t.Fatalf("MaxFrameLen(1500) = %d, want 1514", got)
	}
}
