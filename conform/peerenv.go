package conform

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// What RoCEEnv and IWARPEnv share about the peer's control channel: the hello
// asked when the environment is made, the timeouts' defaults, and whether a case
// can run at all. Written once here so that the two transports' environments
// decide these the same way.

// peerHello asks peer for its hello and checks that it speaks ControlProtocol
// and, unless transport is "", that its transport is transport. A nil peer (one
// offering no control protocol) has no hello: nil, and no error.
func peerHello(ctx context.Context, peer Control, transport string) (*Hello, error) {
	if peer == nil {
		return nil, nil
	}
	h, err := peer.Hello(ctx)
	if err != nil {
		return nil, err
	}
	if h.Protocol != ControlProtocol {
		return nil, fmt.Errorf("conform: peer speaks %q, want %q", h.Protocol, ControlProtocol)
	}
	if transport != "" && h.Transport != transport {
		return nil, fmt.Errorf("conform: the peer's transport is %q, not %s", h.Transport, transport)
	}
	return h, nil
}

// orDefault is d if it is set (positive), def otherwise: the environments'
// AnswerTimeout and Silence.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// peerLacks says why a case needing the control operations ops cannot run
// against a peer that said hello h on peer (either may be nil), and ok false
// when it can.
func peerLacks(peer Control, h *Hello, ops []string) (v Verdict, ok bool) {
	if peer == nil || h == nil {
		return NotApplicablef("the peer offers no control protocol (the case needs %s)", strings.Join(ops, ", ")), true
	}
	for _, op := range ops {
		if !h.Has(op) {
			return NotApplicablef("the peer's control protocol lacks %s", op), true
		}
	}
	return Verdict{}, false
}
