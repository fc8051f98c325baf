"""Reduce to rank 0: the root ends with the element-wise reduction; the other ranks receive nothing.

busbw factor 1: all the data must reach the root through its one link (nccl-tests
doc/PERFORMANCE.md). Only the root's output is checked, as nccl-tests does. torch's reduce is in
place only: "out of place" through torch copies the input into the output buffer and reduces that;
the raw NCCL path makes the real out-of-place ncclReduce call.
"""

from __future__ import annotations

from ncclprobe.nccl.names import nccl_function
from ncclprobe.probes.collectives.base import (
    Collective,
    arange,
    nccl_op,
    nccl_type,
    reduce_values,
    torch_op,
    whole_shape,
)

ROOT = 0


class Reduce(Collective):
    name, reduces, root = "reduce", True, ROOT
    nccl_name = nccl_function(name)
    torch_note = "out of place through torch is a copy plus an in-place reduce"

    def shape(self, size_bytes, dtype, nranks):
        return whole_shape(size_bytes, dtype)

    def busbw_factor(self, nranks):
        return 1.0

    def expected(self, shape, rank, nranks, op):
        return reduce_values(arange(shape.recv_elems), nranks, op) if rank == ROOT else None

    def launch(self, send, recv, group, in_place, op):
        import torch.distributed as dist

        if not in_place:
            recv.copy_(send)
        dist.reduce(recv, dst=dist.get_global_rank(group, ROOT), op=torch_op(op), group=group)

    def nccl_calls(self, send, recv, shape, dtype, op, rank, nranks, version):
        return [("ncclReduce", (send, recv, shape.count, nccl_type(dtype), nccl_op(op), ROOT))]
