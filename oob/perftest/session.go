package perftest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/softrdma/softrdma/oob"
)

// Role is the side a session plays. perftest's client is the side given a server name.
type Role uint8

// The roles.
const (
	RoleServer Role = iota + 1
	RoleClient
)

// String returns "server" or "client".
func (r Role) String() string {
	switch r {
	case RoleServer:
		return "server"
	case RoleClient:
		return "client"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Session runs single perftest exchanges over a Carrier. Every exchange has the client
// send first and then receive, and the server receive first and then send.
type Session struct {
	// Carrier moves the messages.
	Carrier Carrier
	// Role is this side's role.
	Role Role
	// UseRDMACM says the messages travel on an rdma_cm QP (-R, -z): the keys go in
	// their binary form and no "done" is exchanged.
	UseRDMACM bool
	// WithGID says the keys message carries the GID (perftest's gid_index != -1: always
	// on RoCE and iWARP, and with -x on InfiniBand). Both sides must agree. Ignored
	// with UseRDMACM, whose binary form always has the GID.
	WithGID bool
}

// Exchange sends mine and receives theirs (which must come in exactly len(theirs)
// bytes), in the role's order: ctx_xchg_data.
func (s *Session) Exchange(ctx context.Context, mine, theirs []byte) error {
	recv := func() error {
		n, err := s.Carrier.Receive(ctx, theirs)
		if err != nil {
			return fmt.Errorf("receiving %d bytes: %w", len(theirs), err)
		}
		if n != len(theirs) {
			return &oob.Error{Message: "perftest message", Field: "length", Value: strconv.Itoa(n),
				Reason: "want " + strconv.Itoa(len(theirs)), Err: oob.ErrTruncated}
		}
		return nil
	}
	send := func() error {
		if err := s.Carrier.Send(ctx, mine); err != nil {
			return fmt.Errorf("sending %d bytes: %w", len(mine), err)
		}
		return nil
	}
	switch s.Role {
	case RoleClient:
		if err := send(); err != nil {
			return err
		}
		return recv()
	case RoleServer:
		if err := recv(); err != nil {
			return err
		}
		return send()
	}
	return fmt.Errorf("perftest: session has no role (%v)", s.Role)
}

// Versions exchanges version messages (exchange_versions) and returns the peer's. It
// fails with oob.ErrIncompatible, after the exchange, if the peer's version is older
// than MinPeerVersion, where perftest gives up.
func (s *Session) Versions(ctx context.Context, local Version) (Version, error) {
	var remote Version
	if err := s.Exchange(ctx, local[:], remote[:]); err != nil {
		return remote, err
	}
	if remote.Number() < MinPeerVersion {
		return remote, &oob.Error{Message: "perftest version", Value: strconv.Quote(remote.String()),
			Reason: "< 5.70, which perftest 4.5 refuses", Err: oob.ErrIncompatible}
	}
	return remote, nil
}

// SysData exchanges the cycle buffer and the cache line size, one message each
// (check_sys_data), and returns the peer's values.
func (s *Session) SysData(ctx context.Context, local SysData) (SysData, error) {
	var mine, theirs [SysDataSize]byte
	_, _ = local.AppendBinary(mine[:0])
	for i := 0; i < SysDataSize; i += 4 {
		if err := s.Exchange(ctx, mine[i:i+4], theirs[i:i+4]); err != nil {
			return SysData{}, err
		}
	}
	var remote SysData
	return remote, remote.UnmarshalBinary(theirs[:])
}

// MTU exchanges MTU messages (check_mtu) and returns the peer's MTU; m.Negotiate(remote)
// is the MTU both sides then use.
func (s *Session) MTU(ctx context.Context, local MTU) (MTU, error) {
	var mine, theirs [MTUSize]byte
	if _, err := local.AppendBinary(mine[:0]); err != nil {
		return 0, err
	}
	if err := s.Exchange(ctx, mine[:], theirs[:]); err != nil {
		return 0, err
	}
	var remote MTU
	return remote, remote.UnmarshalBinary(theirs[:])
}

// KeysLen returns the size of this session's keys message.
func (s *Session) KeysLen() int {
	if s.UseRDMACM {
		return DestBinarySize
	}
	return KeysLen(s.WithGID)
}

// HandShake exchanges keys (ctx_hand_shake) and returns the peer's Dest. perftest also
// uses it as a barrier: the same keys go back and forth several times.
func (s *Session) HandShake(ctx context.Context, local *Dest) (Dest, error) {
	var mine, theirs [KeysGIDSize]byte // the largest form
	n := s.KeysLen()
	var err error
	if s.UseRDMACM {
		_, err = local.AppendBinary(mine[:0])
	} else {
		_, err = local.AppendKeys(mine[:0], s.WithGID)
	}
	if err != nil {
		return Dest{}, err
	}
	if err := s.Exchange(ctx, mine[:n], theirs[:n]); err != nil {
		return Dest{}, err
	}
	var remote Dest
	if s.UseRDMACM {
		err = remote.UnmarshalBinary(theirs[:n])
	} else {
		remote.GIDIndex = local.GIDIndex // as ctx_hand_shake does: the format is ours
		err = remote.UnmarshalKeys(theirs[:n], s.WithGID)
	}
	return remote, err
}

// Reports exchanges bandwidth reports, one message per field (xchg_bw_reports), and
// returns the peer's. local.PerPort decides whether the per-port fields travel; both
// sides must agree.
func (s *Session) Reports(ctx context.Context, local *BWReport) (BWReport, error) {
	var mine, theirs [ReportPerPortSize]byte
	enc, _ := local.AppendBinary(mine[:0])
	for i := 0; i < len(enc); i += ReportFieldSize {
		if err := s.Exchange(ctx, enc[i:i+ReportFieldSize], theirs[i:i+ReportFieldSize]); err != nil {
			return BWReport{}, err
		}
	}
	var remote BWReport
	return remote, remote.UnmarshalBinary(theirs[:len(enc)])
}

// Done ends a TCP exchange as ctx_close_connection does after its handshake: it writes
// "done" and, at the same time, reads the peer's "done", which both sides write. Not
// getting the peer's "done" (it may already have closed) is not an error: peerDone
// says whether it came. Anything else in its place is an oob.ErrUnexpected error. With
// UseRDMACM nothing is exchanged.
func (s *Session) Done(ctx context.Context) (peerDone bool, err error) {
	if s.UseRDMACM {
		return false, nil
	}
	sent := make(chan error, 1)
	go func() { sent <- s.Carrier.Send(ctx, []byte(Done)) }()
	var buf [len(Done)]byte
	n, rerr := s.Carrier.Receive(ctx, buf[:])
	if err := <-sent; err != nil {
		return false, fmt.Errorf("sending done: %w", err)
	}
	if rerr != nil && n == 0 {
		return false, nil
	}
	if string(buf[:n]) != Done {
		return false, &oob.Error{Message: "perftest done", Value: strconv.Quote(string(buf[:n])), Reason: `want "done\x00"`, Err: oob.ErrUnexpected}
	}
	return true, nil
}
