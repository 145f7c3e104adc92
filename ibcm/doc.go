// Package ibcm is the InfiniBand communication manager over a RoCE device:
// QP1 (the GSI) and its management datagrams (MADs, IBTA Vol. 1 chapter 13),
// the CM messages as header views (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR,
// chapter 12) with rdma_cm's CMA private-data header, and Agent, the
// connection state machine that rdmacm drives. It sits above roce (it sends
// and receives through a roce.Device) and below rdmacm.
package ibcm
