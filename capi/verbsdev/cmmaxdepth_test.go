package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMaxDepthParams (testdata/cmmaxdepth.c): rdma_connect and rdma_accept
// take RDMA_MAX_INIT_DEPTH and RDMA_MAX_RESP_RES (0xff) as the device's
// maximum, as rdma-core's librdmacm does, and still refuse another depth above
// the device's with EINVAL; one process connects to itself, over both
// transports.
func TestMaxDepthParams(t *testing.T) {
	lib := buildLib(t)
	prog := filepath.Join(t.TempDir(), "cmmaxdepth")
	if o, err := exec.Command("gcc", "-Wall", "-o", prog, "testdata/cmmaxdepth.c",
		filepath.Join(lib, "librdmacm.so.1"), filepath.Join(lib, "libibverbs.so.1")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := fmt.Sprintf("127.%d.%d.1", 100+rand.IntN(100), 1+rand.IntN(250))
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
	prog := filepath.Join(t.TempDir(), "cmqpex")
	if o, err := exec.Command("gcc", "-Wall", "-o", prog, "testdata/cmqpex.c",
		filepath.Join(lib, "librdmacm.so.1"), filepath.Join(lib, "libibverbs.so.1")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := fmt.Sprintf("127.%d.%d.1", 100+rand.IntN(100), 1+rand.IntN(250))
			out, errOut, err := run(t, lib, tr+":"+addr, prog, addr, fmt.Sprint(20000+rand.IntN(20000)))
			if err != nil || out != "ok\n" {
				t.Fatalf("cmqpex: %v\n%s%s", err, out, errOut)
			}
		})
	}
}
