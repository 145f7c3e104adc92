package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestRdmaServerClient runs rdma-core's examples of librdmacm's synchronous
// "verbs" API, both ends on the libraries, over both transports:
//   - rdma_server / rdma_client: rdma_getaddrinfo, rdma_create_ep with a QP
//     (passive: the QP of each request made by rdma_get_request), rdma_listen,
//     rdma_reg_msgs, rdma_post_recv, rdma_accept and rdma_connect on synchronous
//     IDs, rdma_post_send (inline: the server checks ibv_query_qp's
//     max_inline_data first), rdma_get_send_comp and rdma_get_recv_comp
//     waiting on the CQs' completion channels, rdma_disconnect, rdma_destroy_ep;
//   - rdma_xserver / rdma_xclient (RC; XRC is not offered, as on rxe and siw):
//     the server binds the wildcard address; the client asks for one send SGE
//     and no inline data and posts 16 bytes with IBV_SEND_INLINE, which
//     works because a QP gets the room of its WQE as rxe gives it (one SGE:
//     16 bytes of inline data).
func TestRdmaServerClient(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "rdma_server", "rdma_client", "rdma_xserver", "rdma_xclient")
	for _, tr := range transports {
		for _, p := range []struct{ srv, cli string }{{"rdma_server", "rdma_client"}, {"rdma_xserver", "rdma_xclient"}} {
			t.Run(tr+" "+p.srv, func(t *testing.T) {
				port := fmt.Sprint(20000 + rand.IntN(20000))
				so, co := cmPairOf(t, lib, tr, p.srv, p.cli,
					func(a string) []string {
						if p.srv == "rdma_xserver" {
							return []string{"-p", port} // binds the wildcard address
						}
						return []string{"-s", a, "-p", port}
					},
					func(a string) []string { return []string{"-s", a, "-p", port} })
				if !strings.Contains(so, p.srv+": end 0") || !strings.Contains(co, p.cli+": end 0") {
					t.Errorf("no \"end 0\" at both ends\nserver:\n%s\nclient:\n%s", so, co)
				}
				if strings.Contains(so, "doesn't support IBV_SEND_INLINE") {
					t.Errorf("rdma_server found no inline data room:\n%s", so)
				}
			})
		}
	}
}
