//go:build !race

package netio

// raceEnabled says the race detector is on: its instrumentation allocates,
// so allocation counts are not checked.
const raceEnabled = false
