// Package conform is a protocol conformance suite for RDMA transports: a scripted
// peer that sends exactly the packet a case asks for — including wrong ones (a bad
// ICRC, a wrong P_Key or Q_Key, an impossible pad count, an opcode out of sequence,
// a PSN from the future) — captures what the implementation under test answers, and
// judges the answer against what the specification requires.
//
// A Case has an ID ("rc.psn.gap"), the section of the specification it checks (IBTA
// Vol. 1 chapter 9 for RoCE; RFC 5040/5041/5044/6581 for iWARP), the IBTA compliance
// statement where a public source confirms its number ("C9-105"), whether the
// specification says MUST or SHOULD (Level), what it sends, what the specification
// says must come back, and a Run function that returns a Verdict: pass (with what
// was observed), fail (with the bytes seen, shown in hex), or not applicable (with
// the reason: the peer does not offer the control the case needs). The catalogues
// are data: a table of rows (roce_cases.go, iwarp_cases.go) whose bodies are small
// methods (roce_bodies.go, iwarp_bodies.go). A Runner runs a catalogue, filtered
// by --case style globs, into a Report that prints as a table, as JSON, or as
// JUnit XML; a peer's expected-failures file (ReadWaivers) turns the failures it
// lists, with their reasons, into XFAIL results that do not fail the run.
//
// The RoCE tester (RoCEEnv, RoCECases) injects raw RoCEv2 frames through a Link —
// a simulated port (deterministic, virtual time) or a netio endpoint on a real
// network — building every header with ibtransport's views and roce.FrameHeaders.
// What it needs of the peer besides the wire (a QP connected to the tester's QPN
// and PSN, a registered region, receives posted, memory read back, a QP's state)
// it asks for over a small JSON control protocol (CONTROL.md) that a softrdma peer
// serves (Server; `softrdma conform serve`). NewSelfRoCE builds an in-process
// softrdma peer on the simulator for `softrdma conform --self`, optionally with a
// Fault that makes it answer wrongly, to show that every case can fail.
//
// The iWARP tester (IWARPEnv, IWARPCases) plugs into the same Case, Runner and
// control protocol: the peer's QPs listen on TCP (create_qp returns the address),
// and the tester speaks MPA, DDP and RDMAP octet by octet on its connections,
// built with package iwarp's header views, wrong ones included. NewSelfIWARP is
// the in-process iWARP peer on loopback TCP, with an IWARPFault proxy for the
// broken variants.
package conform
