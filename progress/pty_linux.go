package progress

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenPTY opens a pseudo-terminal pair, for tests of what a command prints
// on a terminal: give it slave as its standard error and read master.
func OpenPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*os.File, *os.File, error) {
		m.Close()
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil { // unlockpt
		return fail(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN) // ptsname
	if err != nil {
		return fail(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return fail(err)
	}
	return m, s, nil
}
