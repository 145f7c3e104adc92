package ibtransport_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestModifyAttrRanges: every attribute value outside its range is refused with a
// *ModifyQPError that names the attribute and the value, and the QP is left
// exactly as it was (state and every attribute, also those given beside the bad
// one). The limits themselves are accepted, so each check is exact.
func TestModifyAttrRanges(t *testing.T) {
	const portMTU, maxRdAtomic = 1024, 16
	type edit func(a *ib.QPAttr)
	cases := []struct {
		name  string
		typ   ib.QPType
		from  ib.QPState
		to    ib.QPState
		extra ib.QPAttrMask // given besides the transition's required attributes
		edit  edit
		bad   ib.QPAttrMask // the attribute named; 0 = accepted
		want  string        // in the error text
	}{
		{"state 9", ib.QPTypeRC, ib.QPStateRTS, 9, 0, nil, ib.QPAttrState, "QPState 9 is not a state"},
		{"port 0", ib.QPTypeRC, ib.QPStateReset, ib.QPStateInit, 0, func(a *ib.QPAttr) { a.Port = 0 }, ib.QPAttrPort, "Port 0: the only port is 1"},
		{"pkey index 1 of 1", ib.QPTypeRC, ib.QPStateReset, ib.QPStateInit, 0, func(a *ib.QPAttr) { a.PKeyIndex = 1 }, ib.QPAttrPKeyIndex, "PKeyIndex 1 >= table size 1"},
		{"pkey index 0xffff at INIT→RTR", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, ib.QPAttrPKeyIndex, func(a *ib.QPAttr) { a.PKeyIndex = 0xffff }, ib.QPAttrPKeyIndex, "PKeyIndex 65535 >= table size 1"},
		{"UD pkey index 2", ib.QPTypeUD, ib.QPStateReset, ib.QPStateInit, 0, func(a *ib.QPAttr) { a.PKeyIndex = 2 }, ib.QPAttrPKeyIndex, "PKeyIndex 2 >= table size 1"},
		{"unknown access bit", ib.QPTypeRC, ib.QPStateReset, ib.QPStateInit, 0, func(a *ib.QPAttr) { a.AccessFlags = 1 << 20 }, ib.QPAttrAccessFlags, "has unknown bits"},
		{"path MTU above the port's", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.PathMTU = 2048 }, ib.QPAttrPathMTU, "PathMTU 2048 > port MTU 1024"},
		{"UC path MTU 4096", ib.QPTypeUC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.PathMTU = 4096 }, ib.QPAttrPathMTU, "PathMTU 4096 > port MTU 1024"},
		{"path MTU 0", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.PathMTU = 0 }, ib.QPAttrPathMTU, "PathMTU 0 not one of"},
		{"path MTU = port MTU", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.PathMTU = portMTU }, 0, ""},
		{"min RNR timer 32", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.MinRNRTimer = 32 }, ib.QPAttrMinRNRTimer, "MinRNRTimer 32 > 31"},
		{"min RNR timer 31", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.MinRNRTimer = 31 }, 0, ""},
		{"max dest rd atomic -1", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.MaxDestRdAtomic = -1 }, ib.QPAttrMaxDestRdAtomic, "MaxDestRdAtomic -1 not in 0..16"},
		{"max dest rd atomic 17", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.MaxDestRdAtomic = maxRdAtomic + 1 }, ib.QPAttrMaxDestRdAtomic, "MaxDestRdAtomic 17 not in 0..16"},
		{"max dest rd atomic 16", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.MaxDestRdAtomic = maxRdAtomic }, 0, ""},
		{"RQ PSN 2^24", ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.RQPSN = 1 << 24 }, ib.QPAttrRQPSN, "RQPSN 0x1000000 is wider than 24 bits"},
		{"dest QPN 2^32-1", ib.QPTypeUC, ib.QPStateInit, ib.QPStateRTR, 0, func(a *ib.QPAttr) { a.DestQPN = ^uint32(0) }, ib.QPAttrDestQPN, "DestQPN 0xffffffff is wider than 24 bits"},
		{"timeout 32", ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.Timeout = 32 }, ib.QPAttrTimeout, "Timeout 32 > 31"},
		{"timeout 255", ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.Timeout = 255 }, ib.QPAttrTimeout, "Timeout 255 > 31"},
		{"timeout 31", ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.Timeout = 31 }, 0, ""},
		{"retry count 8", ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.RetryCnt = 8 }, ib.QPAttrRetryCnt, "RetryCnt 8 > 7"},
		{"RNR retry 8", ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.RNRRetry = 8 }, ib.QPAttrRNRRetry, "RNRRetry 8 > 7"},
		{"max rd atomic -1", ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.MaxRdAtomic = -1 }, ib.QPAttrMaxRdAtomic, "MaxRdAtomic -1 not in 0..16"},
		{"max rd atomic 17", ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.MaxRdAtomic = maxRdAtomic + 1 }, ib.QPAttrMaxRdAtomic, "MaxRdAtomic 17 not in 0..16"},
		{"SQ PSN 2^24", ib.QPTypeUC, ib.QPStateRTR, ib.QPStateRTS, 0, func(a *ib.QPAttr) { a.SQPSN = 1 << 24 }, ib.QPAttrSQPSN, "SQPSN 0x1000000 is wider than 24 bits"},
		{"RTS min RNR timer 40", ib.QPTypeRC, ib.QPStateRTS, ib.QPStateRTS, ib.QPAttrMinRNRTimer, func(a *ib.QPAttr) { a.MinRNRTimer = 40 }, ib.QPAttrMinRNRTimer, "MinRNRTimer 40 > 31"},
		{"RTS unknown access bit", ib.QPTypeRC, ib.QPStateRTS, ib.QPStateRTS, ib.QPAttrAccessFlags, func(a *ib.QPAttr) { a.AccessFlags |= 1 << 30 }, ib.QPAttrAccessFlags, "has unknown bits"},
		// SQD→SQD takes most path attributes: a bad one next to good ones
		// changes none of them.
		{"SQD timeout 32 beside a retry count", ib.QPTypeRC, ib.QPStateSQD, ib.QPStateSQD, ib.QPAttrTimeout | ib.QPAttrRetryCnt,
			func(a *ib.QPAttr) { a.Timeout, a.RetryCnt = 32, 2 }, ib.QPAttrTimeout, "Timeout 32 > 31"},
		{"SQD RNR retry 200 beside a timeout", ib.QPTypeRC, ib.QPStateSQD, ib.QPStateSQD, ib.QPAttrTimeout | ib.QPAttrRNRRetry,
			func(a *ib.QPAttr) { a.Timeout, a.RNRRetry = 20, 200 }, ib.QPAttrRNRRetry, "RNRRetry 200 > 7"},
		{"SQD retry count 9 beside an RNR retry", ib.QPTypeRC, ib.QPStateSQD, ib.QPStateSQD, ib.QPAttrRetryCnt | ib.QPAttrRNRRetry,
			func(a *ib.QPAttr) { a.RetryCnt, a.RNRRetry = 9, 1 }, ib.QPAttrRetryCnt, "RetryCnt 9 > 7"},
		{"SQD pkey index 3 beside max rd atomic", ib.QPTypeRC, ib.QPStateSQD, ib.QPStateSQD, ib.QPAttrPKeyIndex | ib.QPAttrMaxRdAtomic,
			func(a *ib.QPAttr) { a.PKeyIndex, a.MaxRdAtomic = 3, 1 }, ib.QPAttrPKeyIndex, "PKeyIndex 3 >= table size 1"},
		{"SQD port 2", ib.QPTypeRC, ib.QPStateSQD, ib.QPStateSQD, ib.QPAttrPort, func(a *ib.QPAttr) { a.Port = 2 }, ib.QPAttrPort, "Port 2: the only port is 1"},
		{"SQD timeout 0 retry 7 RNR retry 0", ib.QPTypeRC, ib.QPStateSQD, ib.QPStateSQD, ib.QPAttrTimeout | ib.QPAttrRetryCnt | ib.QPAttrRNRRetry,
			func(a *ib.QPAttr) { a.Timeout, a.RetryCnt, a.RNRRetry = 0, 7, 0 }, 0, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep, err := ibtest.NewEndpoint(ib.ContextConfig{Seed: uint64(100 + i), PortMTU: portMTU, MaxRdAtomic: maxRdAtomic}, c.typ)
			if err != nil {
				t.Fatal(err)
			}
			qp := ep.QP
			if c.from != ib.QPStateReset {
				driveTo(t, qp, c.from)
			}
			a := fullAttr()
			a.QPState = c.to
			if c.edit != nil {
				c.edit(a)
			}
			mask := ib.QPAttrState | requiredAttrs(c.typ, c.from, c.to) | c.extra
			before := qp.Query()
			err = qp.Modify(a, mask)
			if c.bad == 0 {
				if err != nil {
					t.Fatalf("a value at its limit was refused: %v", err)
				}
				if qp.State() != c.to {
					t.Fatalf("state %s, want %s", qp.State(), c.to)
				}
				return
			}
			var me *ib.ModifyQPError
			if !errors.As(err, &me) || !errors.Is(err, ib.ErrModifyQP) {
				t.Fatalf("Modify returned %v (%T), want a *ModifyQPError", err, err)
			}
			if me.Attr != c.bad || me.QPN != qp.QPN() || me.From != c.from {
				t.Fatalf("error names %s (QPN %#x, from %s), want %s (QPN %#x, from %s)", me.Attr, me.QPN, me.From, c.bad, qp.QPN(), c.from)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			if after := qp.Query(); !reflect.DeepEqual(before, after) {
				t.Fatalf("a refused Modify changed the QP:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}
