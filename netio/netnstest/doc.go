// Package netnstest gives tests private Linux network namespaces joined by
// veth pairs (package netio/netns), so that raw-socket, TAP and multi-host
// tests run as root without touching the host's own network configuration
// and without a second process: a socket created inside a namespace (NS.Do)
// stays there.
//
// Everything the package configures lives inside the namespaces it creates;
// the root namespace is never modified. Namespaces are held by file
// descriptors and removed by testing.TB.Cleanup; because nothing is mounted
// by default, a test binary that dies early leaks nothing either (the
// kernel destroys a namespace, and the veth pair in it, once the last
// reference goes). Set SOFTRDMA_NETNS_MOUNT=1 to also bind-mount each
// namespace at /run/netns/NAME so that `ip netns exec NAME tcpdump ...` can
// watch a running test.
//
// The package is Linux only; on other systems it is empty.
package netnstest
