package demo

import (
	"errors"
	"testing"
)

// TestAddPhase: a phase is verified only if it ran clean and its check (if
// any) passed; the first failure is its Detail, unverifies the run, and is
// returned; the check does not run after a failed phase.
func TestAddPhase(t *testing.T) {
	ran, bad := errors.New("ran"), errors.New("check")
	for _, tt := range []struct {
		name      string
		err       error
		verify    func() error
		want      error
		checked   bool
		runVerify bool
	}{
		{"clean, no check", nil, nil, nil, false, true},
		{"clean, check passes", nil, func() error { return nil }, nil, true, true},
		{"clean, check fails", nil, func() error { return bad }, bad, true, false},
		{"failed", ran, func() error { return bad }, ran, false, false},
	} {
		res := Result{Verified: true}
		checked := false
		verify := tt.verify
		if verify != nil {
			verify = func() error { checked = true; return tt.verify() }
		}
		got := res.addPhase(OpStats{Operation: "WRITE", Messages: 3}, tt.err, verify)
		if got != tt.want || checked != tt.checked || res.Verified != tt.runVerify || len(res.Operations) != 1 {
			t.Fatalf("%s: returned %v, checked %v, run verified %v, %d ops", tt.name, got, checked, res.Verified, len(res.Operations))
		}
		st := res.Operations[0]
		wantDetail := ""
		if tt.want != nil {
			wantDetail = tt.want.Error()
		}
		if st.Verified != (tt.want == nil) || st.Detail != wantDetail || st.Operation != "WRITE" || st.Messages != 3 {
			t.Errorf("%s: %+v", tt.name, st)
		}
	}
}
