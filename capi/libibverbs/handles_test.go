//go:build cgo

package main

import (
	"syscall"
	"testing"
)

// TestHandleLookups: a handle that is 0, was never made, was deleted or names
// another type is not found (cgo.Handle panicked for the deleted one), and a
// handle is taken once.
func TestHandleLookups(t *testing.T) {
	w := &cmID{}
	live, gone, other := newHandle(w), newHandle(&cmID{}), newHandle(&cmChannel{})
	defer deleteHandle(live)
	defer deleteHandle(other)
	if _, ok := takeHandle[*cmID](gone); !ok {
		t.Fatal("taking a live handle failed")
	}
	for _, c := range []struct {
		name string
		h    handle
		ok   bool
	}{
		{"live", live, true},
		{"0", 0, false},
		{"never made", live + 1000, false},
		{"deleted", gone, false},
		{"another type's", other, false},
	} {
		if v, ok := value[*cmID](c.h); ok != c.ok || (ok && v != w) {
			t.Errorf("%s: value %p, %v; want found %v", c.name, v, ok, c.ok)
		}
	}
	if _, ok := takeHandle[*cmID](other); ok {
		t.Error("taking a handle as another type's succeeded")
	}
	if _, ok := value[*cmChannel](other); !ok {
		t.Error("a failed take as another type's deleted the handle")
	}
	if _, ok := takeHandle[*cmID](live); !ok {
		t.Error("taking a live handle failed")
	}
	if _, ok := takeHandle[*cmID](live); ok {
		t.Error("a handle was taken twice")
	}
}

// TestCMStaleHandles: each srcm_* call given the handle of an ID or channel
// that is 0, was destroyed or was never made fails with EINVAL, as
// rdma-core's calls on a destroyed ID do, and does not panic. rping's CM
// thread calls srcm_info (rdma_get_cm_event's refresh) with the handle of the
// ID its main thread has just destroyed.
func TestCMStaleHandles(t *testing.T) {
	gone := newHandle(&cmID{})
	deleteHandle(gone)
	goneCh := newHandle(&cmChannel{})
	deleteHandle(goneCh)
	calls := []struct {
		name string
		call func(h handle) int
	}{
		{"srcm_info", func(h handle) int { return int(srcm_info(h, nil)) }},
		{"srcm_destroy_id", func(h handle) int { return int(srcm_destroy_id(h, nil)) }},
		{"srcm_migrate_id", func(h handle) int { return int(srcm_migrate_id(h, h, nil)) }},
		{"srcm_resolve_route", func(h handle) int { return int(srcm_resolve_route(h, 0)) }},
		{"srcm_release_qp", func(h handle) int { return int(srcm_release_qp(h)) }},
		{"srcm_connect", func(h handle) int { return int(srcm_connect(h, nil)) }},
		{"srcm_listen", func(h handle) int { return int(srcm_listen(h, 0)) }},
		{"srcm_accept", func(h handle) int { return int(srcm_accept(h, nil)) }},
		{"srcm_reject", func(h handle) int { return int(srcm_reject(h, nil, 0, 0)) }},
		{"srcm_disconnect", func(h handle) int { return int(srcm_disconnect(h)) }},
		{"srcm_set_tos", func(h handle) int { return int(srcm_set_tos(h, 0)) }},
		{"srcm_notify", func(h handle) int { return int(srcm_notify(h, 0)) }},
		{"srcm_establish", func(h handle) int { return int(srcm_establish(h)) }},
		{"srcm_init_qp_attr", func(h handle) int { return int(srcm_init_qp_attr(h, nil, nil)) }},
		{"srcm_next_event (channel)", func(h handle) int { return int(srcm_next_event(h, nil, 0, 0)) }},
		{"srcm_destroy_channel", func(h handle) int { return int(srcm_destroy_channel(h)) }},
	}
	for _, c := range calls {
		for _, h := range []struct {
			name string
			h    handle
		}{{"0", 0}, {"destroyed ID", gone}, {"destroyed channel", goneCh}, {"never made", gone + 1000}} {
			if rc := c.call(h.h); rc != int(syscall.EINVAL) {
				t.Errorf("%s(%s handle): %d, want EINVAL", c.name, h.name, rc)
			}
		}
	}
}
