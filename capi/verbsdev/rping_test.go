package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestRpingFlags runs Debian's rping with the flags TestRping does not use,
// both ends on the libraries:
//   - -q (RoCE): each end creates its QP with ibv_create_qp, names it in
//     conn_param.qp_num and moves it to RTS itself with rdma_init_qp_attr's
//     attributes; the client gets RDMA_CM_EVENT_CONNECT_RESPONSE and sends the
//     RTU with rdma_establish.
//   - -q (iWARP): rdma_connect and rdma_accept take the program's QP by
//     number and the MPA exchange moves it to RTS, as iw_cm does; the server
//     moves its QP first with rdma_init_qp_attr's iWARP attributes (INIT and
//     RTR: state, remote write and read, port; RTS: the port only), INIT→RTR
//     leaving it in INIT as siw does; the client, past ESTABLISHED (iWARP has
//     no CONNECT_RESPONSE), moves its QP, in RTS, to INIT, RTR and RTS, which
//     siw takes as no-ops but for the access flags, and calls rdma_establish,
//     which returns 0 (the kernel's returns EINVAL there; see
//     rdmacm.ID.Establish). rdma_init_qp_attr was refused on iWARP, and the
//     modifies with it.
//   - -S 4000 (a 4000-byte ping buffer, more than one MTU for every READ and
//     WRITE) with -I, the client's source address, on both transports.
func TestRpingFlags(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "rping")
	cases := []struct {
		name, tr string
		flags    []string
		cliFlags func(srvAddr string) []string
	}{
		{"roce -q", "roce", []string{"-q"}, nil},
		{"iwarp -q", "iwarp", []string{"-q"}, nil},
		{"roce -S 4000 -I", "roce", []string{"-S", "4000"}, cliSource},
		{"iwarp -S 4000 -I", "iwarp", []string{"-S", "4000"}, cliSource},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			port := fmt.Sprint(20000 + rand.IntN(20000))
			common := append([]string{"-p", port, "-C", "5", "-v", "-V"}, c.flags...)
			so, co := cmPair(t, lib, c.tr, "rping",
				func(a string) []string { return append([]string{"-s", "-a", a}, common...) },
				func(a string) []string {
					args := append([]string{"-c", "-a", a}, common...)
					if c.cliFlags != nil {
						args = append(args, c.cliFlags(a)...)
					}
					return args
				})
			for i := range 5 {
				want := fmt.Sprintf("ping data: rdma-ping-%d: ", i)
				if !strings.Contains(co, want) || !strings.Contains(so, "server "+want) {
					t.Errorf("no %q at both ends\nserver:\n%s\nclient:\n%s", want, so, co)
				}
			}
			if c.name == "roce -q" && !strings.Contains(co, "RDMA_CM_EVENT_CONNECT_RESPONSE") {
				t.Errorf("-q: the client got no CONNECT_RESPONSE (rdma_cm moved its QP?):\n%s", co)
			}
		})
	}
}

// cliSource returns rping's -I with the client's address in cmPair: the
// server's with .2 for the last .1.
func cliSource(srvAddr string) []string {
	return []string{"-I", strings.TrimSuffix(srvAddr, "1") + "2"}
}
