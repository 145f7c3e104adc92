// Package decode explains a pcap or pcapng capture of RoCE (v1 and v2) and iWARP traffic:
// one line per RDMA packet, like a tshark summary, then a summary per flow. It verifies
// the ICRC of every RoCE packet and the CRC32c of every FPDU that carries one, and
// reassembles each direction of every TCP connection to find iWARP's MPA frames.
//
// Run is the whole command; the softrdma binary only parses flags around it.
package decode
