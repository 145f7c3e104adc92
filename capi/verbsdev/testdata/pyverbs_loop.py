"""pyverbs on softrdma's libibverbs.so.1: open the first device, query it,
PD, MR, then an RC QP pair connected to each other over the device's own
address: CQ, QP, post_send/post_recv, poll. One line per step."""
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

name = get_device_list()[0].name.decode()
ctx = Context(name=name)
da = ctx.query_device()
pa = ctx.query_port(1)
gid = ctx.query_gid(1, 1)
print("device", name, "port state", pa.state, "max_qp_wr", da.max_qp_wr > 0)
pd = PD(ctx)
acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
mr = MR(pd, 8192, acc)
cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)


def connect(a, b):
    for q, peer in ((a, b), (b, a)):
        qa = QPAttr(port_num=1)
        qa.qp_access_flags = acc
        qa.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=1), is_global=1, port_num=1)
        qa.dest_qp_num = peer.qp_num
        qa.path_mtu = e.IBV_MTU_1024
        qa.max_dest_rd_atomic = 1
        qa.max_rd_atomic = 1
        qa.min_rnr_timer = 12
        qa.timeout = 14
        qa.retry_cnt = 7
        qa.rnr_retry = 7
        q.to_rts(qa)


def poll(cq, n):
    got, t0 = [], time.time()
    while len(got) < n and time.time() - t0 < 20:
        k, wcs = cq.poll(n - len(got))
        got += wcs[:k]
    return sorted((w.wr_id, w.status, w.opcode) for w in got)


# Plain CQ and QPs.
cq = CQ(ctx, 16)
a, b = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)), QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
connect(a, b)
mr.write(b"\0" * 64, 64, 4096)
b.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 4096, 64, mr.lkey)]))
mr.write(b"plain send", 10)
a.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 10, mr.lkey)]))
print("plain completions", poll(cq, 2))
print("plain received", mr.read(10, 4096))

