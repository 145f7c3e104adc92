// Package netio moves packets and streams behind small batched interfaces: UDP
// sockets, AF_PACKET, TAP, an in-memory pipe, and a capture tap writing pcap/pcapng.
package netio
