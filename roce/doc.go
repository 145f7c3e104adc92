// Package roce is the RoCE device: RoCEv1 (Ethertype 0x8915 + GRH) and RoCEv2
// (IP/UDP port 4791) framing, the ICRC, the GID table, and the device that
// moves IB transport packets between the ibtransport engine and a netio
// endpoint. The IB CM and QP1 MADs are package ibcm; next-hop resolution
// (ARP/NDP, the kernel's neighbour table) is package neigh.
package roce
