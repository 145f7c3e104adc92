// Package roce is the RoCE device: RoCEv1 (Ethertype 0x8915 + GRH) and RoCEv2
// (IP/UDP port 4791) encapsulation, the ICRC, the GID table, and QP1 MADs and the IB CM.
package roce
