package rdmacm

import "github.com/softrdma/softrdma/iwarp"

// relaxIRD raises the IRD an rdma_accept offers (cp.IRD, negative for none)
// to the initiator's ORD when that is larger and within limit, as siw_accept
// does (siw_cm.c, relaxed_ird_negotiation, on by default) for an MPA v2
// request, so that the initiator's READs have a place, the Read RTR of
// peer-to-peer mode first. rdma_xserver accepts with responder_resources 0:
// without this the client's Read RTR met a Terminate (no buffer on the Read
// Request queue) and rdma_connect failed.
func relaxIRD(req *iwarp.ConnRequest, cp *iwarp.ConnParams, limit int) {
	w, enhanced := req.Request().IRDORD()
	if !enhanced {
		return // no IRD/ORD words (revision 1, or no Enhanced flag): w is empty
	}
	if o := int(w.ORD()); o > max(cp.IRD, 0) && o <= limit {
		cp.IRD = o
	}
}
