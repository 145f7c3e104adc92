"""pyverbs on softrdma's libibverbs.so.1: pyverbs_loop.py's plain objects
first (imported: open the first device, query it, PD, MR, an RC QP pair
connected to each other over the device's own address; CQ, QP,
post_send/post_recv, poll), then extended ones (CQEX polled with
start_poll/poll_next/end_poll, QPEx with the ibv_wr_* builders: a SEND and an
RDMA WRITE with immediate), then what is refused with EOPNOTSUPP: a CQ with
completion timestamps (rxe has no clock either). One line per step. (Written
by the robust helper; its polling loop took start_poll's and poll_next's
ENOENT return, which pyverbs returns rather than raises, for a completion,
and spun.)"""
import sys

sys.dont_write_bytecode = True  # importing pyverbs_loop leaves no __pycache__ in testdata

from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPEx, QPInitAttrEx

from pyverbs_loop import *  # noqa: F401,F403 (the plain part, and its objects)

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
