// Package decode explains a pcap or pcapng capture of RoCE (v1 and v2) and iWARP traffic:
// one line per RDMA packet, like a tshark summary, then a summary per flow. It verifies
// the ICRC of every RoCE packet and the CRC32c of every FPDU that carries one, and
// reassembles each direction of every TCP connection to find iWARP's MPA frames. It reads
// pcap and pcapng (also gzip-compressed) of link types Ethernet, raw IP and Linux cooked
// capture v1 and v2 (LINUX_SLL and LINUX_SLL2, what tcpdump -i any writes); frames of
// any other link type are an error naming its number.
//
// A capture taken on a host whose UDP sockets send with UDP GSO (softrdma's UDP backend)
// holds the datagrams before segmentation: one UDP payload of several RoCE packets. Such
// a frame is split where each segment's ICRC, for the headers the segment leaves with,
// is right, and each packet decoded as sent; one note names those frames. A frame cut
// by the snap length cannot be split, and is an error saying what it seems to be when
// its payload is longer than the largest IB MTU.
//
// A frame the capture cut short (a small snap length) is an error when what it shows
// makes it RDMA: UDP destination port 4791, a TCP segment of a connection found to be
// iWARP (by its start frames, even from the first octets of an MPA key, or by FPDUs), or
// headers cut so short that only its addresses match an RDMA flow. The octets lost are
// skipped: FPDU framing is found again after them, also when they held an MPA start
// frame. Frames cut before anything tells whether they are RDMA are one error together.
//
// A RoCE frame whose captured octets hold all its headers (link, IP, UDP or GRH, the
// BTH and the extension headers of its opcode), and a TCP segment cut inside an FPDU
// whose MPA, DDP and RDMAP headers the capture holds, are decoded from those headers as
// tshark does ("[Packet size limited during capture]"): the packet's line is the one the
// whole frame would give, its flow counts it (lengths from the headers and the wire),
// and its error says it was cut after its headers and that the payload and the ICRC or
// CRC are not verified. Such errors (Problem.Cut) are counted apart in the summary; they
// still make the exit status 1. An FPDU's octets cut off are stood in for by zeros, so
// the framing goes on after it without resynchronising.
//
// Run is the whole command; the softrdma binary only parses flags around it.
package decode
