package perftest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Test is one of the perftest tools.
type Test uint8

// The tools whose exchanges Plan knows.
const (
	WriteBW Test = iota + 1
	ReadBW
	SendBW
	AtomicBW
	WriteLat
	ReadLat
	SendLat
	AtomicLat
)

var testNames = [...]string{WriteBW: "ib_write_bw", ReadBW: "ib_read_bw", SendBW: "ib_send_bw", AtomicBW: "ib_atomic_bw",
	WriteLat: "ib_write_lat", ReadLat: "ib_read_lat", SendLat: "ib_send_lat", AtomicLat: "ib_atomic_lat"}

// String returns the tool's name, e.g. "ib_write_bw".
func (t Test) String() string {
	if t >= WriteBW && t <= AtomicLat {
		return testNames[t]
	}
	return "test(" + strconv.Itoa(int(t)) + ")"
}

// ParseTest returns the Test named s: "ib_write_bw" or "write_bw".
func ParseTest(s string) (Test, error) {
	for t := WriteBW; t <= AtomicLat; t++ {
		if s == testNames[t] || "ib_"+s == testNames[t] {
			return t, nil
		}
	}
	return 0, fmt.Errorf("perftest: unknown test %q", s)
}

// Bandwidth reports whether t is a _bw tool.
func (t Test) Bandwidth() bool { return t >= WriteBW && t <= AtomicBW }

// Config says which exchange to run: the tool, the side, and the perftest options that
// change the sequence of messages.
type Config struct {
	// Test is the tool.
	Test Test
	// Role is this side's role.
	Role Role
	// Version is the version to announce; the zero value means DefaultVersion.
	Version Version
	// SysData is this side's system data; the zero value means DefaultSysData.
	SysData SysData
	// MTU is this side's MTU (the port's active MTU, or -m); Run requires a valid one.
	MTU MTU
	// NumQPs is the number of test QPs (-q); 0 means 1.
	NumQPs int
	// Size is the message size (-s), passed to the Run and PostReceives hooks.
	Size uint64
	// RunAll runs every size (-a): RunAllSizes, or 2, 4, ..., 2^23 if nil. ib_atomic_bw
	// and ib_atomic_lat run once whatever RunAll says, as perftest does.
	RunAll      bool
	RunAllSizes []uint64
	// Duplex is -b (bidirectional; bandwidth tests only).
	Duplex bool
	// Duration is -D (a timed test): ib_send_bw -b then exchanges no reports.
	Duration bool
	// UseRDMACM (-z, implied by -R) sends the messages over an rdma_cm QP.
	UseRDMACM bool
	// WorkRDMACM (-R) also connects the test QPs with rdma_cm: two handshakes of
	// all-zero keys around the ConnectCM hook replace the Connect hook. It implies
	// UseRDMACM.
	WorkRDMACM bool
	// WithGID: see Session.WithGID.
	WithGID bool
	// PerPort is report_per_port (dual-port runs): reports carry 9 fields.
	PerPort bool
}

func (c Config) numQPs() int {
	if c.NumQPs <= 0 {
		return 1
	}
	return c.NumQPs
}

func (c Config) useRDMACM() bool { return c.UseRDMACM || c.WorkRDMACM }

func (c Config) version() Version {
	if c.Version == (Version{}) {
		return DefaultVersion
	}
	return c.Version
}

// sizes returns the message sizes the test runs.
func (c Config) sizes() []uint64 {
	if !c.RunAll || c.Test == AtomicBW || c.Test == AtomicLat {
		return []uint64{c.Size}
	}
	if c.RunAllSizes != nil {
		return c.RunAllSizes
	}
	s := make([]uint64, 0, 23)
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// StepKind says what a Step does.
type StepKind uint8

// The steps. Exchanges move messages; hooks are where the caller does its part.
const (
	// StepVersions exchanges versions (16 bytes each way).
	StepVersions StepKind = iota + 1
	// StepSysData exchanges the cycle buffer and cache line sizes (4 + 4 bytes).
	StepSysData
	// StepMTU exchanges MTUs (2 bytes).
	StepMTU
	// StepConnectCM is the ConnectCM hook (-R): rdma_cm connects the test QPs.
	StepConnectCM
	// StepSetup is the Setup hook: the test QPs and buffers exist, their Dests are
	// known (set_up_connection).
	StepSetup
	// StepHandShake exchanges keys: Step.QP's Dest, or zeros (Step.Zero).
	StepHandShake
	// StepConnect is the Connect hook: the QPs go to RTR and RTS (ctx_connect).
	StepConnect
	// StepPostReceives is the PostReceives hook (send tests, receiving side): post
	// the receives for Step.Size before the barrier that lets the sender start.
	StepPostReceives
	// StepRun is the Run hook: the measurement for Step.Size.
	StepRun
	// StepReports exchanges bandwidth reports (5 or 9 messages of 8 bytes).
	StepReports
	// StepDone exchanges "done" (TCP only); the exchange is over.
	StepDone
)

var stepNames = [...]string{StepVersions: "versions", StepSysData: "sys data", StepMTU: "mtu",
	StepConnectCM: "connect cm", StepSetup: "setup", StepHandShake: "handshake", StepConnect: "connect",
	StepPostReceives: "post receives", StepRun: "run", StepReports: "reports", StepDone: "done"}

// String names the kind.
func (k StepKind) String() string {
	if k >= StepVersions && k <= StepDone {
		return stepNames[k]
	}
	return "step(" + strconv.Itoa(int(k)) + ")"
}

// Exchanges reports whether the step moves messages (the others are hooks).
func (k StepKind) Exchanges() bool {
	switch k {
	case StepVersions, StepSysData, StepMTU, StepHandShake, StepReports, StepDone:
		return true
	}
	return false
}

// Step is one step of a Plan.
type Step struct {
	Kind StepKind
	// QP is the index of the QP whose Dest a handshake sends.
	QP int
	// Zero: the handshake sends all-zero keys (create_rdma_cm_connection's, whose
	// dests are not set up yet).
	Zero bool
	// Size is the message size of StepPostReceives and StepRun.
	Size uint64
	// Note says why perftest does this, in its own words where it has them.
	Note string
}

// String describes the step, e.g. "handshake qp 0 (sync after RTR)".
func (s Step) String() string {
	var b strings.Builder
	b.WriteString(s.Kind.String())
	switch s.Kind {
	case StepHandShake:
		if s.Zero {
			b.WriteString(" zero")
		} else {
			b.WriteString(" qp " + strconv.Itoa(s.QP))
		}
	case StepRun, StepPostReceives:
		b.WriteString(" size " + strconv.FormatUint(s.Size, 10))
	}
	if s.Note != "" {
		b.WriteString(" (" + s.Note + ")")
	}
	return b.String()
}

// MessageSizes returns the sizes of the messages a step exchanges, in order; each is
// sent one way and then the other (nil for hooks).
func (c Config) MessageSizes(s Step) []int {
	switch s.Kind {
	case StepVersions:
		return []int{VersionSize}
	case StepSysData:
		return []int{4, 4}
	case StepMTU:
		return []int{MTUSize}
	case StepHandShake:
		if c.useRDMACM() {
			return []int{DestBinarySize}
		}
		return []int{KeysLen(c.WithGID)}
	case StepReports:
		n := 5
		if c.PerPort {
			n = 9
		}
		sz := make([]int, n)
		for i := range sz {
			sz[i] = ReportFieldSize
		}
		return sz
	case StepDone:
		return []int{len(Done)}
	}
	return nil
}

// Plan returns the steps of cfg's exchange in perftest 4.5-0.17's order (the main()
// of each tool's .c file, for RUN_REGULAR and RUN_ALL on RC/UC/UD; DC, XRC, multicast
// and --run_infinitely are not covered).
func Plan(cfg Config) ([]Step, error) {
	if cfg.Test < WriteBW || cfg.Test > AtomicLat {
		return nil, fmt.Errorf("perftest: unknown test %v", cfg.Test)
	}
	if cfg.Role != RoleClient && cfg.Role != RoleServer {
		return nil, fmt.Errorf("perftest: unknown role %v", cfg.Role)
	}
	if cfg.Duplex && !cfg.Test.Bandwidth() {
		return nil, errors.New("perftest: -b is for bandwidth tests")
	}
	var p []Step
	add := func(s ...Step) { p = append(p, s...) }
	hs := func(qp int, note string) Step { return Step{Kind: StepHandShake, QP: qp, Note: note} }
	perQP := func(note string) {
		for q := range cfg.numQPs() {
			add(hs(q, note))
		}
	}
	server, client := cfg.Role == RoleServer, cfg.Role == RoleClient
	closing := func() {
		add(hs(0, "ctx_close_connection"))
		if !cfg.useRDMACM() {
			add(Step{Kind: StepDone})
		}
	}

	add(Step{Kind: StepVersions}, Step{Kind: StepSysData}, Step{Kind: StepMTU})
	if cfg.WorkRDMACM {
		add(Step{Kind: StepHandShake, Zero: true, Note: "sync before creating RDMA CM connection"},
			Step{Kind: StepConnectCM},
			Step{Kind: StepHandShake, Zero: true, Note: "sync after creating RDMA CM connection"})
	}
	add(Step{Kind: StepSetup})
	connect := func() {
		if !cfg.WorkRDMACM {
			add(Step{Kind: StepConnect})
		}
	}

	switch cfg.Test {
	case WriteBW, ReadBW, AtomicBW:
		perQP("exchange keys")
		connect()
		perQP("print remote")
		add(hs(0, "additional handshake after moving qp to RTR"))
		if server && !cfg.Duplex {
			add(hs(0, "server waits for client to finish"), Step{Kind: StepReports})
			closing()
			return p, nil
		}
		for _, size := range cfg.sizes() {
			if cfg.Duplex {
				add(hs(0, "sync before run"))
			}
			add(Step{Kind: StepRun, Size: size})
			if cfg.Duplex && cfg.RunAll && cfg.Test != AtomicBW && cfg.version().Number() >= 4.6 {
				add(hs(0, "sync between message sizes"))
			}
			if cfg.Duplex {
				add(Step{Kind: StepReports})
			}
		}
		if client && !cfg.Duplex {
			add(hs(0, "tell server the test is over"), Step{Kind: StepReports})
		}
		closing()

	case SendBW:
		perQP("exchange keys")
		connect()
		add(hs(0, "after RTR"))
		perQP("print remote")
		for _, size := range cfg.sizes() {
			if server || cfg.Duplex {
				add(Step{Kind: StepPostReceives, Size: size})
			}
			add(hs(0, "receives posted"), Step{Kind: StepRun, Size: size})
			if cfg.Duplex && !cfg.Duration {
				add(Step{Kind: StepReports})
			}
			if cfg.RunAll {
				add(hs(0, "sync between message sizes"))
			}
		}
		closing()

	case WriteLat, ReadLat, AtomicLat:
		add(hs(0, "exchange keys"))
		perQP("exchange keys")
		connect()
		perQP("print remote")
		add(hs(0, "additional handshake after moving qp to RTR"))
		if cfg.Test == WriteLat {
			for _, size := range cfg.sizes() {
				add(Step{Kind: StepRun, Size: size})
			}
			return p, nil // ib_write_lat ends without closing handshake or "done"
		}
		if server {
			closing() // only the client posts READs / atomics
			return p, nil
		}
		for _, size := range cfg.sizes() {
			add(Step{Kind: StepRun, Size: size})
		}
		closing()

	case SendLat:
		perQP("exchange keys")
		connect()
		add(hs(0, "after RTR"))
		perQP("print remote")
		for _, size := range cfg.sizes() {
			add(Step{Kind: StepPostReceives, Size: size}, hs(0, "receives posted"), Step{Kind: StepRun, Size: size})
		}
		closing()
	}
	return p, nil
}
