//go:build linux

package netnstest

import (
	"testing"

	"github.com/softrdma/softrdma/netio/netns"
)

// NamePrefix starts the name of every namespace this package creates.
const NamePrefix = "softrdma-test-"

// MountEnv is the environment variable that, set to "1", makes New also
// bind-mount each namespace at /run/netns/NAME (see the package comment).
const MountEnv = netns.MountEnv

// Veth interface names in the two namespaces of a Pair.
const (
	LinkA = netns.LinkA
	LinkB = netns.LinkB
)

// NS is a network namespace made for a test (see netns.NS).
type NS = netns.NS

// Side is one end of a Pair: a namespace and the veth interface in it.
type Side = netns.Side

// Pair is two namespaces joined by a veth pair, each end up and addressed.
type Pair = netns.Pair

// PairConfig tunes NewPair. The zero value is valid; an empty Prefix means
// NamePrefix.
type PairConfig = netns.PairConfig

// Require skips the test, with a one-line reason, unless the process may
// create network namespaces (it runs as root and unshare(CLONE_NEWNET) works).
func Require(tb testing.TB) {
	tb.Helper()
	if err := netns.Check(); err != nil {
		tb.Skipf("netnstest: cannot create network namespaces: %v", err)
	}
}

// New creates a fresh, empty network namespace with a unique name (NamePrefix
// and random hex digits), with its loopback interface up, and registers its
// removal with tb.Cleanup. It skips the test if namespaces cannot be created.
func New(tb testing.TB) *NS {
	tb.Helper()
	Require(tb)
	ns, err := netns.New(NamePrefix)
	if err != nil {
		tb.Fatalf("netnstest: %v", err)
	}
	tb.Cleanup(func() { ns.Close() })
	return ns
}

// NewPair creates two namespaces (see New) joined by a veth pair: LinkA in
// A with 10.99.X.1/24 and fd99:0:0:X::1/64, LinkB in B with 10.99.X.2/24 and
// fd99:0:0:X::2/64, X random, both links up. Everything is removed at
// cleanup. It returns once both links are running. It skips the test if
// namespaces cannot be created.
func NewPair(tb testing.TB, cfg PairConfig) *Pair {
	tb.Helper()
	Require(tb)
	if cfg.Prefix == "" {
		cfg.Prefix = NamePrefix
	}
	p, err := netns.NewPair(cfg)
	if err != nil {
		tb.Fatalf("netnstest: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}
