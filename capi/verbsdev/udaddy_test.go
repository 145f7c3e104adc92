package verbsdev_test

import (
	"strings"
	"testing"
	"time"
)

// TestUdaddy runs rdma-core's udaddy, UD QPs over rdma_cm (RDMA_PS_UDP: the
// route is resolved with a SIDR exchange, RDMA_CM_EVENT_ESTABLISHED carries
// the server's QPN, Q_Key and address handle), with both ends on the
// libraries, over RoCE: two connections, ten SEND_WITH_IMMs each way. The
// server answers each client with an address handle made by
// ibv_create_ah_from_wc from the first message's completion and GRH area (an
// IPv4 header in its last 20 bytes), and the Q_Key rdma_cm gave its QP
// (ibv_query_qp). udaddy's -p is a port space, not a port: both ends use
// rdma_cm port 7174 on the test's own addresses. iWARP carries no UD (siw
// has RC QPs only), so there is no iWARP run: the library refuses a UD QP on
// an iWARP device with EOPNOTSUPP, as siw does.
func TestUdaddy(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "udaddy")
	so, co := cmPair(t, lib, "roce", "udaddy",
		func(a string) []string { return []string{"-b", a, "-c", "2", "-C", "10"} },
		func(a string) []string { return []string{"-s", a, "-c", "2", "-C", "10"} })
	for _, o := range []string{so, co} {
		if !strings.Contains(o, "data transfers complete") || !strings.Contains(o, "return status 0") {
			t.Errorf("udaddy did not complete:\nserver:\n%s\nclient:\n%s", so, co)
		}
	}
	if !strings.Contains(so, "sending replies") {
		t.Errorf("udaddy's server sent no replies:\n%s", so)
	}
}

// TestAHFromWC (testdata/ahwc.c): ibv_init_ah_from_wc and
// ibv_create_ah_from_wc with GRH areas made by hand, each answered as
// rdma-core v44's libibverbs answers: RoCEv2 over IPv4 (the header in the
// area's last 20 bytes; a stale IPv6 version nibble before it loses to a
// valid IPv4 checksum), IPv6 (next header UDP), multicast destinations
// (EINVAL), an unknown next header or no IP header (EPROTONOSUPPORT), a
// destination not in the GID table, and a completion without IBV_WC_GRH.
func TestAHFromWC(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "ahwc")
	addr := randomNet() + "1"
	out, errOut, err := runBounded(t, lib, "roce:"+addr, time.Minute, prog, addr)
	if err != nil || strings.Contains(out, "BAD") || !strings.Contains(out, "bad: 0") {
		t.Fatalf("ahwc: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
}
