//go:build !race

package test

// raceEnabled says the race detector is on: the soak test runs smaller.
const raceEnabled = false
