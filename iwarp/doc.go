// Package iwarp is the iWARP device: MPA (RFC 5044, RFC 6581) over TCP, DDP (RFC 5041)
// and RDMAP (RFC 5040, RFC 7306).
//
// The wire format is in mpa.go, fpdu.go, marker.go, ddp.go, rdmap.go and terminate.go
// (header views and encoders) and stream.go (a decoder for captures). The device is the
// rest: Open returns a Device whose verbs engine (Device.Context, an
// ibtransport.Context) is the same as a RoCE device's, except that its QPs are run by
// this package over ordinary TCP sockets. An application creates PDs, MRs, CQs and QPs
// as for RoCE, then connects a QP with Dial (the MPA initiator) or Listener.Accept /
// ConnRequest.Accept (the responder), exchanging private data as rdma_cm does, and
// posts work requests and polls completions as usual.
//
// Each connected QP has a reader and a writer goroutine. The writer takes send WQEs
// from the engine (ibtransport.Wire.NextSend, the SGL already resolved to the
// registered memory) and writes batches of FPDUs with one writev, payload straight
// from the MR; the reader reads what the socket holds through a pooled buffer, has
// the engine check the STag or take the receive WQE, and puts the payload into that
// memory (large payloads straight from the socket), verifying the CRC32c it computed
// on the way before anything completes.
// Every protocol error found in the peer's traffic is answered with the Terminate RFC
// 5040 §4.8 prescribes, and the QP moves to the error state, flushing its WRs.
package iwarp
