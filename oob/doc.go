// Package oob holds what the out-of-band exchanges of the real RDMA test tools have in
// common: the error type their decoders return and the context handling of their socket
// I/O. The exchanges themselves live in the subpackages:
//
//   - [github.com/softrdma/softrdma/oob/pingpong]: rdma-core's
//     ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (one text
//     message per QP each way over TCP port 18515, then "done");
//   - [github.com/softrdma/softrdma/oob/perftest]: perftest 4.5-0.17
//     (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw and the _lat tools): versions,
//     system data, MTU, QP keys, barriers, bandwidth reports and "done", over TCP port
//     18515 or, with -R / -z, as RC SENDs on an rdma_cm QP.
//
// README.md in this directory documents every exchange byte by byte, with the source file
// and function each fact was read from and what the captures in testdata/captures showed.
package oob
