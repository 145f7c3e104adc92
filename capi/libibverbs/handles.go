package main

// #include <stdint.h>
import "C"

import (
	"sync"
	"sync/atomic"
)

// Handles name the Go objects behind the C structs, as cgo.Handle does, but a
// lookup of a handle that is 0, was never made or was deleted fails instead
// of panicking (cgo.Handle.Value panics: "misuse of an invalid Handle"). C
// hands a handle back from any thread, and one thread may use an object's
// handle while another destroys it: rping's CM thread refreshes the ID of the
// DISCONNECTED event it took while its main thread destroys that ID. The call
// then fails with EINVAL, as rdma-core's does for a destroyed ID, and the
// process goes on. Handles count up from 1 and are never reused.
var handles struct {
	m    sync.Map // uintptr → the object
	last atomic.Uintptr
}

// handle is a handle as C holds it (uintptr_t).
type handle = C.uintptr_t

// newHandle stores v under a new handle.
func newHandle(v any) handle {
	h := handles.last.Add(1)
	handles.m.Store(h, v)
	return handle(h)
}

// value is the object of handle h if it is a T; false for 0, a deleted
// handle or another type's.
func value[T any](h handle) (T, bool) {
	var zero T
	v, ok := handles.m.Load(uintptr(h))
	if !ok {
		return zero, false
	}
	t, ok := v.(T)
	return t, ok
}

// takeHandle deletes handle h and returns its object if it is a T: of
// callers racing to destroy the same object, one has it and the others get
// false, and every lookup after it fails.
func takeHandle[T any](h handle) (T, bool) {
	var zero T
	v, ok := handles.m.Load(uintptr(h))
	if !ok {
		return zero, false
	}
	t, ok := v.(T)
	if !ok || !handles.m.CompareAndDelete(uintptr(h), v) {
		return zero, false
	}
	return t, true
}

// deleteHandle deletes handle h (nothing if it is not there).
func deleteHandle(h handle) { handles.m.Delete(uintptr(h)) }
