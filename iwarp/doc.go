// Package iwarp is the iWARP device: MPA (RFC 5044, RFC 6581) over TCP, DDP (RFC 5041)
// and RDMAP (RFC 5040, RFC 7306).
package iwarp
