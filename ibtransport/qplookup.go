package ibtransport

// QP returns the Context's QP numbered qpn, nil if there is none (destroyed,
// never created, or QP 0/1). rdma_cm needs it where a program names its own
// QP by number (rdma_accept's conn_param.qp_num) on a transport that binds
// the QP object itself to the connection (iWARP).
func (c *Context) QP(qpn uint32) *QP {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.qps[qpn&QPNMask]
}
