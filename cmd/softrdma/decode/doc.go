// Package decode explains a pcap or pcapng capture of RoCE (v1 and v2) and iWARP traffic:
// one line per RDMA packet, like a tshark summary, then a summary per flow. It verifies
// the ICRC of every RoCE packet and the CRC32c of every FPDU that carries one, and
// reassembles each direction of every TCP connection to find iWARP's MPA frames.
//
// A frame the capture cut short (a small snap length) is an error when what it shows
// makes it RDMA: UDP destination port 4791, a TCP segment of a connection found to be
// iWARP (by its start frames, even from the first octets of an MPA key, or by FPDUs), or
// headers cut so short that only its addresses match an RDMA flow. The octets lost are
// skipped: FPDU framing is found again after them, also when they held an MPA start
// frame. Frames cut before anything tells whether they are RDMA are one error together.
//
// Run is the whole command; the softrdma binary only parses flags around it.
package decode
