package perf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob/perftest"
)

// -c: perftest's connection types (change_conn_type, force_dependecies).
// RC is every test's; UC carries WRITEs and SENDs (no READ, no atomic: UC has
// no responder resources), and librdmacm cannot connect it (-R); UD carries
// SENDs (send_bw, send_lat; here not with -R, whose UD QPs rdma_cm would
// connect by SIDR); siw is RC only. UC QPs go to RTR with the path, the peer's QPN and PSN only and to
// RTS with the send PSN only (no ACK timeout, retry or RNR: nothing is
// acknowledged), as ctx_modify_qp_to_rtr/_rts leave them; a receiver posts a
// receive for every message (force_dependecies, UC_MAX_RX).

// checkConn checks -c against the test, -R and the transport.
func checkConn(o *Options) error {
	conn := strings.ToUpper(o.Conn)
	t := o.Test
	read := t == perftest.ReadBW || t == perftest.ReadLat
	atomic := t == perftest.AtomicBW
	switch conn {
	case "RC":
		return nil
	case "UC":
		switch {
		case read || atomic:
			return errors.New("-c UC: UC connection not possible in READ/ATOMIC verbs")
		case o.RDMACM:
			return errors.New("-c UC: UC is not supported in librdmacm (drop -R)")
		}
	case "UD":
		if t != perftest.SendBW && t != perftest.SendLat {
			return errors.New("-c UD: UD connection only possible in SEND verb")
		}
		if o.RDMACM {
			return errors.New("-c UD: with -R (UD QPs connected by rdma_cm) not implemented: -z exchanges the keys over rdma_cm and connects UD")
		}
	case "XRC", "DC", "SRD", "RAWETH":
		return fmt.Errorf("-c %s: softrdma has no %s QPs: want RC, UC or UD", o.Conn, o.Conn)
	default:
		return fmt.Errorf("-c %q: want RC, UC or UD", o.Conn)
	}
	if o.Transport == "iwarp" {
		return fmt.Errorf("-c %s: iWARP connections are RC only", conn)
	}
	return nil
}

// qpType is -c's QP type.
func (p *params) qpType() ibtransport.QPType {
	switch p.conn {
	case "UC":
		return ibtransport.QPTypeUC
	case "UD":
		return ibtransport.QPTypeUD
	}
	return ibtransport.QPTypeRC
}

// UD (send tests): the QPs have perftest's Q_Key (DEF_QKEY) from INIT on,
// go to RTR with nothing and to RTS with the send PSN; each send names the
// peer's QP through an address handle of its GID, its QPN and the Q_Key; a
// receive has room for the 40-byte GRH before the message, which starts on a
// cache line, and the buffer a cache line more for it (ctx_set_recv_wqes,
// alloc_ctx). A message is at most the MTU: -s above it becomes the MTU, -a
// runs the sizes up to it.

const (
	defQKey = 0x11111111 // DEF_QKEY
	udGRH   = 40         // UD_ADDITION
)

// udSizes clamps a UD test's size to the MTU (in bytes), and returns -a's
// sizes: 2, 4, ... up to the MTU.
func (p *params) udSizes(mtu int) []uint64 {
	if p.conn != "UD" {
		return nil
	}
	p.size = min(p.size, uint64(mtu))
	var all []uint64
	for sz := uint64(2); sz <= uint64(mtu); sz *= 2 {
		all = append(all, sz)
	}
	return all
}

// connectUnreliable moves a UC QP to RTR (the path, the peer's QPN and
// PSN), and to RTS (its send PSN) if it sends; a UD QP to RTR and RTS with
// its address handle kept for the sends.
func (s *session) connectUnreliable(qp *ibtransport.QP, local, remote perftest.Dest) error {
	p := s.p
	ah := ibtransport.AddressHandle{DGID: remote.GID, SGIDIndex: uint8(s.gidIndex), HopLimit: hopLimit}
	if p.conn == "UD" {
		s.ah = append(s.ah, ah)
		if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTR}, ibtransport.QPAttrState); err != nil {
			return fmt.Errorf("Failed to modify QP %d to RTR: %w", qp.QPN(), err)
		}
		if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: local.PSN},
			ibtransport.QPAttrState|ibtransport.QPAttrSQPSN); err != nil {
			return fmt.Errorf("Failed to modify QP to RTS: %w", err)
		}
		return nil
	}
	if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: s.mtu,
		DestQPN: remote.QPN, RQPSN: remote.PSN},
		ibtransport.QPAttrState|ibtransport.QPAttrAH|ibtransport.QPAttrPathMTU|ibtransport.QPAttrDestQPN|
			ibtransport.QPAttrRQPSN); err != nil {
		return fmt.Errorf("Failed to modify QP %d to RTR: %w", qp.QPN(), err)
	}
	if p.bw && p.server && !p.duplex {
		return nil
	}
	if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: local.PSN},
		ibtransport.QPAttrState|ibtransport.QPAttrSQPSN); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}
