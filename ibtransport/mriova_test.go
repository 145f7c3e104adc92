package ibtransport_test

import (
	"bytes"
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestRegMRAt: a region registered at an I/O virtual address the application
// chose (ibv_reg_mr_iova2; a C program's own virtual address) is reached at that
// address and no other, by local SGEs and by a peer's RDMA WRITE and READ; two
// regions may overlap in that address space (their keys tell them apart); a range
// that wraps, or a nonzero iova with ZeroBased, is refused.
func TestRegMRAt(t *testing.T) {
	p := newRC(t)
	const n = 256
	const srcVA, dstVA = 0x5555_0000_1000, 0x7ffd_dead_b000
	src := make([]byte, n)
	dst := make([]byte, n)
	srcMR, err := p.A.PD.RegMRAt(src, srcVA, ib.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dstMR, err := p.B.PD.RegMRAt(dst, dstVA, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	// Another region of B at the same address: allowed, and it is not the one
	// dstMR's key reaches.
	other := make([]byte, n)
	if _, err := p.B.PD.RegMRAt(other, dstVA, ib.AccessLocalWrite|ib.AccessRemoteWrite); err != nil {
		t.Fatalf("overlapping region: %v", err)
	}
	if srcMR.Addr() != srcVA || dstMR.Addr() != dstVA {
		t.Fatalf("addresses 0x%x 0x%x, want 0x%x 0x%x", srcMR.Addr(), dstMR.Addr(), uint64(srcVA), uint64(dstVA))
	}

	copy(src, pattern(n, 3))
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Signaled: true,
		SGL:        []ib.SGE{{Addr: srcVA + 16, Length: n - 32, LKey: srcMR.LKey()}},
		RemoteAddr: dstVA + 32, RKey: dstMR.RKey()})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
	if !bytes.Equal(dst[32:n-16+16], src[16:n-16]) || !bytes.Equal(dst[:32], make([]byte, 32)) {
		t.Fatalf("WRITE at iova+32 landed wrong: %x", dst)
	}
	if !bytes.Equal(other, make([]byte, n)) {
		t.Fatal("WRITE through dstMR's key reached the other region at the same address")
	}

	clear(src)
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, Signaled: true,
		SGL:        []ib.SGE{{Addr: srcVA, Length: n, LKey: srcMR.LKey()}},
		RemoteAddr: dstVA, RKey: dstMR.RKey()})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCRDMARead, ib.WCSuccess)
	if !bytes.Equal(src, dst) {
		t.Fatal("READ at iova returned other bytes")
	}

	// One byte below the region: a remote access error, nothing written.
	post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, Signaled: true,
		SGL:        []ib.SGE{{Addr: srcVA, Length: 8, LKey: srcMR.LKey()}},
		RemoteAddr: dstVA - 1, RKey: dstMR.RKey()})
	if wc := complete(t, p, p.A.CQ, 1)[0]; wc.Status != ib.WCRemAccessErr {
		t.Fatalf("WRITE one byte below the region: %v, want remote access error", wc)
	}

	for _, tc := range []struct {
		name   string
		iova   uint64
		len    int
		access ib.Access
	}{
		{"range wraps", ^uint64(0) - 10, 64, ib.AccessLocalWrite},
		{"nonzero iova with ZeroBased", 0x1000, 64, ib.AccessLocalWrite | ib.AccessZeroBased},
	} {
		if _, err := p.A.PD.RegMRAt(make([]byte, tc.len), tc.iova, tc.access); !errors.Is(err, ib.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if mr, err := p.A.PD.RegMRAt(make([]byte, 64), ^uint64(0)-64, ib.AccessLocalWrite); err != nil || mr.Addr() != ^uint64(0)-64 {
		t.Errorf("region ending at the top of the address space: %v", err)
	}
}
