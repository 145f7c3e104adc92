package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestMaxDepthParams (testdata/cmmaxdepth.c): rdma_connect and rdma_accept
// take RDMA_MAX_INIT_DEPTH and RDMA_MAX_RESP_RES (0xff) as the device's
// maximum, as rdma-core's librdmacm does, and still refuse another depth above
// the device's with EINVAL; one process connects to itself, over both
// transports.
func TestMaxDepthParams(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmmaxdepth")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := run(t, lib, tr+":"+addr, prog, addr, fmt.Sprint(20000+rand.IntN(20000)))
			if err != nil || out != "ok\n" {
				t.Fatalf("cmmaxdepth: %v\n%s%s", err, out, errOut)
			}
		})
	}
}

// TestCreateQPExSendOps (testdata/cmqpex.c): rdma_create_qp_ex honours
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS as rdma-core's librdmacm does (the QP is
// made by ibv_create_qp_ex): its work request builders send a message to the
// other side of a connection one process makes to itself, over both
// transports.
func TestCreateQPExSendOps(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmqpex")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := run(t, lib, tr+":"+addr, prog, addr, fmt.Sprint(20000+rand.IntN(20000)))
			if err != nil || out != "ok\n" {
				t.Fatalf("cmqpex: %v\n%s%s", err, out, errOut)
			}
		})
	}
}
