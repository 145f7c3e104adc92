// Package netns makes private Linux network namespaces joined by veth pairs,
// for programs and tests that need two hosts on a real (virtual) link
// without touching the host's own network configuration and without a
// second process: a socket created inside a namespace (NS.Do) stays there.
// softrdma bench uses it directly; tests use the wrapper package
// netio/netnstest, which skips instead of failing and cleans up with
// testing.TB.Cleanup.
//
// Everything the package configures lives inside the namespaces it creates;
// the root namespace is never modified. Namespaces are held by file
// descriptors: because nothing is mounted by default, a program that dies
// early leaks nothing (the kernel destroys a namespace, and the veth pair in
// it, once the last reference goes). Set SOFTRDMA_NETNS_MOUNT=1 to also
// bind-mount each namespace at /run/netns/NAME so that
// `ip netns exec NAME tcpdump ...` can watch a running program.
//
// Creating namespaces needs root (CAP_SYS_ADMIN); Check says whether it
// works. The package is Linux only; on other systems it is empty.
package netns
