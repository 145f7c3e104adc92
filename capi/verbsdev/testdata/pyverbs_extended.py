"""pyverbs on softrdma's libibverbs.so.1: open the first device, query it,
PD, MR, then an RC QP pair connected to each other over the device's own
address, twice: plain objects (CQ, QP, post_send/post_recv, poll) and extended
ones (CQEX polled with start_poll/poll_next/end_poll, QPEx with the ibv_wr_*
builders: a SEND and an RDMA WRITE with immediate), then what is refused
with EOPNOTSUPP: a CQ with completion timestamps (rxe has no clock either), a
QP with memory-window binds (rxe offers them; this library has no windows). One line per step. (Written by the robust helper; its
polling loop took start_poll's and poll_next's ENOENT return, which pyverbs
returns rather than raises, for a completion, and spun.)"""
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
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

# Extended CQ and QPs.
cqx = CQEX(ctx, CqInitAttrEx(cqe=16, wc_flags=e.IBV_WC_STANDARD_FLAGS))
ops = e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM


def qpex():
    ia = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cqx, rcq=cqx, cap=cap, pd=pd, send_ops_flags=ops,
                      comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
    return QPEx(ctx, ia)


c, d = qpex(), qpex()
connect(c, d)
for i in range(2):
    d.post_recv(RecvWR(wr_id=20 + i, num_sge=1, sg=[SGE(mr.buf + 4096 + 128 * i, 64, mr.lkey)]))
mr.write(b"extended send", 13)
mr.write(b"written with imm", 16, 1024)
c.wr_start()
c.wr_id, c.wr_flags = 10, e.IBV_SEND_SIGNALED
c.wr_send()
c.wr_set_sge(SGE(mr.buf, 13, mr.lkey))
c.wr_id = 11
c.wr_rdma_write_imm(mr.rkey, mr.buf + 6144, 0x12345678)
c.wr_set_sge(SGE(mr.buf + 1024, 16, mr.lkey))
c.wr_complete()
got, t0 = [], time.time()
while len(got) < 4 and time.time() - t0 < 20:
    # start_poll and poll_next return ENOENT (2) for an empty CQ; after an
    # empty start_poll there is no end_poll.
    if cqx.start_poll(PollCqAttr()) != 0:
        continue
    while True:
        got.append((cqx.wr_id, cqx.status, cqx.read_opcode(), cqx.read_byte_len()))
        if cqx.poll_next() != 0:
            break
    cqx.end_poll()
print("extended completions", sorted(got))
print("extended received", mr.read(13, 4096), mr.read(16, 6144))


def refused(f):
    try:
        f()
    except PyverbsRDMAError as x:
        return x.error_code
    return 0


print("refused cq timestamps", refused(lambda: CQEX(ctx, CqInitAttrEx(cqe=4, wc_flags=e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP))))
bind = QPInitAttrEx(qp_type=e.IBV_QPT_UD, scq=cqx, rcq=cqx, cap=cap, pd=pd, send_ops_flags=e.IBV_QP_EX_WITH_BIND_MW,
                    comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
print("refused ud qp bind_mw", refused(lambda: QPEx(ctx, bind)))
