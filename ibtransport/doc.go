// Package ibtransport is the InfiniBand transport: the wire headers (BTH and its
// extension headers), the opcode table and 24-bit PSN arithmetic, and the verbs engine
// (PD, MR, CQ, SRQ, QP) with the RC, UC and UD requester, responder and completer that
// RoCE runs. It imports nothing else of softrdma.
package ibtransport
