"""Reduce-scatter: rank r ends with piece r of the element-wise reduction of every rank's buffer.

nccl-tests' size is the whole input, n pieces of `count` elements (`ReduceScatterGetCollByteCount`),
algbw = size / time and busbw factor (n-1)/n (the reduce half of a ring all-reduce). In place, a
rank's output is its own piece of the input buffer (`send[rank*count:]`), as in nccl-tests.
"""

from __future__ import annotations

from ncclprobe.nccl.names import nccl_function
from ncclprobe.probes.collectives.base import (
    Collective,
    arange,
    nccl_op,
    nccl_type,
    per_rank_shape,
    reduce_values,
    torch_op,
)


class ReduceScatter(Collective):
    name, reduces = "reduce_scatter", True
    nccl_name = nccl_function(name)

    def shape(self, size_bytes, dtype, nranks):
        return per_rank_shape(size_bytes, dtype, nranks, send_whole=True)

    def busbw_factor(self, nranks):
        return (nranks - 1) / nranks

    def tuning_size(self, logged_bytes, nranks):
        return logged_bytes * nranks

    def buffers(self, shape, rank, nranks, dtype, device, in_place, op):
        import torch

        send = self.send_input(shape, rank, dtype, device, op)
        if in_place:
            return send, send[rank * shape.count : (rank + 1) * shape.count]
        return send, torch.zeros(shape.recv_elems, dtype=dtype, device=device)

    def expected(self, shape, rank, nranks, op):
        return reduce_values(arange(shape.recv_elems) + rank * shape.count, nranks, op)

    def launch(self, send, recv, group, in_place, op):
        import torch.distributed as dist

        dist.reduce_scatter_tensor(recv, send, op=torch_op(op), group=group)

    def nccl_calls(self, send, recv, shape, dtype, op, rank, nranks, version):
        return [("ncclReduceScatter", (send, recv, shape.count, nccl_type(dtype), nccl_op(op)))]
