package main

import (
	"fmt"
	"math/rand/v2"
)

// loopbackNet returns "127.A.B.", a /24 of 127.0.0.0/8 (all of it is local on
// Linux) chosen at random for one test run, for the RoCE devices of tests that
// bind UDP port 4791 in this namespace: a fixed address (127.0.0.1, which a
// client without -I or -b takes as the route's source for any 127.x peer, or
// 127.0.85.1) is taken by whatever else binds it, another go test of this
// package at the same time among them, and the test fails with "address
// already in use". capi/verbsdev's tests draw from 127.100-199.x.x; these draw
// from 127.200-249.x.x.
func loopbackNet() string {
	return fmt.Sprintf("127.%d.%d.", 200+rand.IntN(50), 1+rand.IntN(250))
}
