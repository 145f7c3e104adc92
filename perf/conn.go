package perf

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob/perftest"
	"github.com/softrdma/softrdma/rdmacm"
)

// -c: perftest's connection types (change_conn_type, force_dependecies).
// RC is every test's; UC carries WRITEs and SENDs (no READ, no atomic: UC has
// no responder resources), and librdmacm cannot connect it (-R); UD carries
// SENDs (send_bw, send_lat); with -R rdma_cm makes the UD QPs in its UDP
// port space (SIDR: the reply gives the client the server's QP and Q_Key);
// siw is RC only. UC QPs go to RTR with the path, the peer's QPN and PSN only and to
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

// testPortSpace is the rdma_cm port space of -R's test QPs: UDP for UD (as
// perftest's rdma_create_id), TCP otherwise.
func (s *session) testPortSpace() rdmacm.PortSpace {
	if s.p.conn == "UD" {
		return rdmacm.PortSpaceUDP
	}
	return rdmacm.PortSpaceTCP
}

// udQKey is the Q_Key of the UD test QPs: perftest's own, or with -R
// rdma_cm's (RDMA_UDP_QKEY, which it gives the QPs it makes).
func (s *session) udQKey() uint32 {
	if s.p.rdmaCM {
		return rdmacm.UDPQKey
	}
	return defQKey
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

// UD with -R, latency tests and -b: perftest's client tells the server its
// QP with one SEND with immediate data (its QPN, 4 bytes of payload) right
// after the SIDR reply (rdma_cm_establish_ud_connection,
// rdma_cm_send_ud_connection_parameters); the server posted a receive of 44
// bytes for it before accepting (rdma_cm_request_ud_connection_parameters)
// and takes it before the test (rdma_cm_initialize_ud_connection_parameters).
// softrdma knows the peer's QP from the exchange's keys; it sends and takes
// the message all the same, so that either side may be perftest.

// udParamsWRID is the work request ID of that message's SEND and receive.
const udParamsWRID = 1 << 40

// udParams reports whether the UD -R connection parameters message is
// exchanged.
func (p *params) udParams() bool {
	return p.conn == "UD" && p.rdmaCM && (!p.bw || p.duplex)
}

// udParamsMR returns the small buffer of that message, registered once.
func (s *session) udParamsMR() (*ibtransport.MR, error) {
	if s.udMR == nil {
		mr, err := s.pd.RegMR(make([]byte, udGRH+4), ibtransport.AccessLocalWrite)
		if err != nil {
			return nil, err
		}
		s.udMR = mr
	}
	return s.udMR, nil
}

// postUDParamsRecv is the server's receive for the client's message on qp.
func (s *session) postUDParamsRecv(qp *ibtransport.QP) error {
	mr, err := s.udParamsMR()
	if err != nil {
		return err
	}
	return qp.PostRecv(ibtransport.RecvWR{WRID: udParamsWRID, SGL: []ibtransport.SGE{mr.SGE(0, udGRH+4)}})
}

// sendUDParams is the client's message on qp to the server's QP that the
// SIDR reply named, and waits for its completion.
func (s *session) sendUDParams(ctx context.Context, qp *ibtransport.QP, peer rdmacm.UDParam) error {
	mr, err := s.udParamsMR()
	if err != nil {
		return err
	}
	ah := peer.AH
	if err := qp.PostSend(ibtransport.SendWR{WRID: udParamsWRID, Opcode: ibtransport.WRSendWithImm, Signaled: true,
		Imm: qp.QPN(), SGL: []ibtransport.SGE{mr.SGE(0, 4)}, AH: &ah, RemoteQPN: peer.QPNum, RemoteQKey: peer.QKey}); err != nil {
		return fmt.Errorf("Failed to post send for RDMA CM UD send connection parameters: %w", err)
	}
	return s.takeUDParams(ctx, s.sendCQ, 1)
}

// takeUDParams waits for n completions of the parameters message on cq.
func (s *session) takeUDParams(ctx context.Context, cq *ibtransport.CQ, n int) error {
	wc := make([]ibtransport.WC, 1)
	for got := 0; got < n; {
		if cq.Poll(wc) == 0 {
			if err := device.WaitCQ(ctx, cq, time.Time{}); err != nil {
				return fmt.Errorf("UD connection parameters in RDMA CM: %w", err)
			}
			continue
		}
		if wc[0].Status != ibtransport.WCSuccess || wc[0].WRID != udParamsWRID {
			return fmt.Errorf("Bad WQE status for UD connection parameters in RDMA CM: %v, wr %d", wc[0].Status, wc[0].WRID)
		}
		got++
	}
	return nil
}
