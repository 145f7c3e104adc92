package perftest

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/softrdma/softrdma/oob"
)

// Hooks are where Run hands control to the caller, at the points of perftest's main()
// where the real tool does its verbs work. Every hook may be nil (nothing to do).
type Hooks struct {
	// ConnectCM (-R only) connects the test QPs with rdma_cm, between the two
	// all-zero handshakes (create_rdma_cm_connection).
	ConnectCM func(ctx context.Context) error
	// Setup creates the test resources if ConnectCM did not, and returns one Dest per
	// test QP (set_up_connection). r holds what has been negotiated so far: the peer's
	// version, the system data and the MTU to use. A nil Setup sends zero Dests.
	Setup func(ctx context.Context, r *Result) ([]Dest, error)
	// Connect moves the QPs to RTR and RTS towards the peer's Dests (ctx_connect).
	// Not called with WorkRDMACM.
	Connect func(ctx context.Context, local, remote []Dest) error
	// PostReceives posts the receives for a send test's messages of the given size
	// (ctx_set_recv_wqes), before the handshake that lets the sender start.
	PostReceives func(ctx context.Context, size uint64) error
	// Run runs the measurement for one message size and returns this side's report
	// (bandwidth tests; latency tests' reports stay local, return the zero value).
	Run func(ctx context.Context, size uint64) (BWReport, error)
	// IdleReport is the report a half-duplex ib_write_bw, ib_read_bw or ib_atomic_bw
	// server sends, which perftest never fills in (it sends uninitialised memory). Nil
	// sends zeros.
	IdleReport func() BWReport
}

// ReportExchange is one report exchange: this side's report and the peer's.
type ReportExchange struct {
	Local, Remote BWReport
}

// Result is what an exchange established.
type Result struct {
	// RemoteVersion is the peer's version message.
	RemoteVersion Version
	// RemoteSysData is the peer's system data, SysData the maximum of both, which
	// both sides use.
	RemoteSysData, SysData SysData
	// RemoteMTU is the peer's MTU, MTU the one both sides use.
	RemoteMTU, MTU MTU
	// Local and Remote are the Dests of the QPs, from the last handshake of each.
	Local, Remote []Dest
	// Reports are the report exchanges, in order. A half-duplex server's Remote is the
	// client's result, which the real server prints.
	Reports []ReportExchange
	// PeerDone says whether the peer's "done" was received.
	PeerDone bool
	// Steps counts the steps completed.
	Steps int
}

// StepError is a failure of one step of a plan.
type StepError struct {
	Role  Role
	Index int
	Step  Step
	Err   error
}

// Error names the side, the step and the cause.
func (e *StepError) Error() string {
	return "perftest " + e.Role.String() + ": step " + strconv.Itoa(e.Index) + " (" + e.Step.String() + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *StepError) Unwrap() error { return e.Err }

// Run executes cfg's Plan over c, calling hooks at their steps. It returns the Result
// so far and a *StepError naming the step that failed, if one did. c is not closed.
func Run(ctx context.Context, c Carrier, cfg Config, hooks Hooks) (*Result, error) {
	plan, err := Plan(cfg)
	if err != nil {
		return nil, err
	}
	if !cfg.MTU.Valid() {
		return nil, fmt.Errorf("perftest: config MTU %v is not one of 256...4096", cfg.MTU)
	}
	s := &Session{Carrier: c, Role: cfg.Role, UseRDMACM: cfg.useRDMACM(), WithGID: cfg.WithGID}
	r := &Result{}
	var lastReport BWReport
	lastReport.PerPort = cfg.PerPort
	sysData := cfg.SysData
	if sysData == (SysData{}) {
		sysData = DefaultSysData
	}
	n := cfg.numQPs()
	for i, st := range plan {
		if err := ctx.Err(); err != nil {
			return r, &StepError{cfg.Role, i, st, err}
		}
		var err error
		switch st.Kind {
		case StepVersions:
			r.RemoteVersion, err = s.Versions(ctx, cfg.version())
		case StepSysData:
			r.RemoteSysData, err = s.SysData(ctx, sysData)
			r.SysData = sysData.Max(r.RemoteSysData)
		case StepMTU:
			r.RemoteMTU, err = s.MTU(ctx, cfg.MTU)
			r.MTU = cfg.MTU.Negotiate(r.RemoteMTU)
		case StepConnectCM:
			if hooks.ConnectCM != nil {
				err = hooks.ConnectCM(ctx)
			}
		case StepSetup:
			r.Local = make([]Dest, n)
			r.Remote = make([]Dest, n)
			if hooks.Setup != nil {
				var ds []Dest
				if ds, err = hooks.Setup(ctx, r); err == nil {
					if len(ds) != n {
						err = fmt.Errorf("setup returned %d dests for %d QPs", len(ds), n)
					} else {
						copy(r.Local, ds)
					}
				}
			}
		case StepHandShake:
			var zero Dest
			local := &zero
			if !st.Zero {
				local = &r.Local[st.QP]
			}
			var remote Dest
			if remote, err = s.HandShake(ctx, local); err == nil && !st.Zero {
				r.Remote[st.QP] = remote
			}
		case StepConnect:
			// perftest checks even when the keys carry no GID, comparing an
			// uninitialised local GID with a zeroed remote one; the check is only
			// meaningful, and only made here, when the GIDs travel.
			if (s.UseRDMACM || s.WithGID) && !GIDCompatible(r.Local[0].GID, r.Remote[0].GID) {
				err = &oob.Error{Message: "perftest keys", Field: "gid",
					Value:  fmt.Sprintf("%v vs %v", netipString(r.Local[0].GID), netipString(r.Remote[0].GID)),
					Reason: "are of different types (IPv4-mapped and not); perftest refuses to connect", Err: oob.ErrIncompatible}
			} else if hooks.Connect != nil {
				err = hooks.Connect(ctx, r.Local, r.Remote)
			}
		case StepPostReceives:
			if hooks.PostReceives != nil {
				err = hooks.PostReceives(ctx, st.Size)
			}
		case StepRun:
			if hooks.Run != nil {
				lastReport, err = hooks.Run(ctx, st.Size)
				lastReport.PerPort = cfg.PerPort
			}
		case StepReports:
			local := lastReport
			if cfg.Role == RoleServer && !cfg.Duplex {
				local = BWReport{}
				if hooks.IdleReport != nil {
					local = hooks.IdleReport()
				}
				local.PerPort = cfg.PerPort
			}
			var remote BWReport
			if remote, err = s.Reports(ctx, &local); err == nil {
				r.Reports = append(r.Reports, ReportExchange{Local: local, Remote: remote})
			}
		case StepDone:
			r.PeerDone, err = s.Done(ctx)
		}
		if err != nil {
			return r, &StepError{cfg.Role, i, st, err}
		}
		r.Steps = i + 1
	}
	return r, nil
}

// RunClient runs cfg's exchange as the client over a TCP connection to the server
// (perftest's client connects over IPv4 to DefaultPort unless -p says otherwise).
func RunClient(ctx context.Context, conn net.Conn, cfg Config, hooks Hooks) (*Result, error) {
	cfg.Role = RoleClient
	return Run(ctx, NewStreamCarrier(conn), cfg, hooks)
}

// RunServer runs cfg's exchange as the server over a TCP connection it accepted
// (perftest's server accepts a single connection, then stops listening).
func RunServer(ctx context.Context, conn net.Conn, cfg Config, hooks Hooks) (*Result, error) {
	cfg.Role = RoleServer
	return Run(ctx, NewStreamCarrier(conn), cfg, hooks)
}
