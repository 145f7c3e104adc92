// Package rdmacm is the RDMA connection manager of softrdma: the semantics of
// the kernel's rdma_cm (librdmacm's rdma_create_id, rdma_resolve_addr,
// rdma_resolve_route, rdma_connect, rdma_listen, rdma_accept, rdma_reject,
// rdma_disconnect and the event channel) over both transports. The same calls
// drive
//
//   - RoCE, through the IB CM on QP1 of a roce.Device (ibcm.Agent): REQ,
//     REP, RTU, REJ, MRA, DREQ, DREP, and SIDR for UD, with rdma_cm's
//     conventions — service ID 0x0000000001060000|port (TCP port space) or
//     0x0000000001110000|port (UDP), the 36-byte CMA header with the IP
//     version, the active side's port and both IP addresses first in the REQ's
//     private data, the flow label from the ports — so that the kernel's
//     rdma_cm accepts softrdma's REQ and softrdma accepts the kernel's;
//   - iWARP, through TCP and the MPA exchange of an iwarp.Device: the private
//     data travels in the MPA request and reply (without a CMA header, as
//     rdma_cm does on iWARP).
//
// # Use
//
// A Manager knows the devices of one host, as the kernel knows its RDMA
// devices; an ID is one rdma_cm_id:
//
//	m := rdmacm.NewManager(rdmacm.Config{Clock: clock})
//	m.AddRoCE(agent) // a ibcm.Agent on a roce.Device; or m.AddIWARP(dev, cfg)
//
//	id, _ := m.CreateID(rdmacm.PortSpaceTCP)
//	id.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("10.0.0.2:7174"), 2*time.Second)
//	ev := <-id.Events() // EventAddrResolved
//	id.ResolveRoute(2 * time.Second)
//	ev = <-id.Events() // EventRouteResolved
//	pd := id.Context().AllocPD() // CQs and MRs likewise
//	qp, _ := id.CreateQP(pd, ibtransport.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: ...})
//	id.Connect(rdmacm.ConnParam{PrivateData: pd, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
//	ev = <-id.Events() // EventEstablished: qp is in RTS
//	...
//	id.Disconnect()
//	ev = <-id.Events() // EventDisconnected, then EventTimewaitExit (RoCE)
//	id.Destroy()
//
// and the passive side:
//
//	l, _ := m.CreateID(rdmacm.PortSpaceTCP)
//	l.BindAddr(netip.MustParseAddrPort("0.0.0.0:7174"))
//	l.Listen(16)
//	ev := <-l.Events() // EventConnectRequest: ev.ID is the new connection
//	qp, _ := ev.ID.CreateQP(pd, attr)
//	ev.ID.Accept(rdmacm.ConnParam{PrivateData: ...}) // or Reject
//	ev = <-ev.ID.Events() // EventEstablished
//
// Events carry rdma_cm's types and statuses: Status is 0, a negative errno
// (StatusTimedOut for a peer that never answered, StatusConnRefused for an
// iWARP reject), or for EventRejected over RoCE the IB CM reject reason (28
// for rdma_reject, 8 for a service nobody listens on). Each ID has its own
// channel; events that find it full wait, in order, for the consumer to read
// (none is dropped), so read them.
//
// # Driving
//
// The RoCE backend has no goroutine of its own: the roce.Device and the
// ibcm.Agent are driven by their Run methods (real time), or stepped with
// Poll and NextDeadline (sim.Network.Drive in tests, deterministic in virtual
// time). Calls never block: results come as events. The iWARP backend runs the
// TCP and MPA work in goroutines of package iwarp and delivers its events from
// them; it reports no EventTimewaitExit (the kernel's iw_cm has none either).
//
// # QP states
//
// CreateQP moves a connected QP to INIT with no remote access (RoCE; iWARP
// grants remote write and read), a UD QP through INIT (Q_Key 0x01234567,
// rdma_cm's RDMA_UDP_QKEY), RTR and RTS. On RoCE the connection then moves it
// as rdma_cm does: INIT again with remote write (and read and atomics if the
// peer's initiator depth is not 0), RTR with the peer's QPN, PSN, MTU, the
// path and the responder resources, and RTS with the PSN, the local ACK
// timeout of the path, the retry counts and the initiator depth — the active
// side on the REP before sending the RTU, the passive side in Accept before
// sending the REP; Disconnect, and a REJ, move it to ERR. Destroy destroys it.
package rdmacm
