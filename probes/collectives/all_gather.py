"""All-gather: every rank ends with the concatenation of every rank's piece, in rank order.

nccl-tests' size is the gathered buffer, n pieces of `count` elements (`AllGatherGetCollByteCount`),
algbw = size / time and busbw factor (n-1)/n: each rank receives the n-1 pieces it lacks.
In place, a rank's own piece already lies at its offset in the output (`recv[rank*count:]`), as
in nccl-tests; torch's `all_gather_into_tensor` accepts that view as its input.
"""

from __future__ import annotations

from ncclprobe.nccl.names import nccl_function
from ncclprobe.probes.collectives.base import (
    Collective,
    arange,
    input_values,
    nccl_type,
    per_rank_shape,
)


class AllGather(Collective):
    name = "all_gather"
    nccl_name = nccl_function(name)

    def shape(self, size_bytes, dtype, nranks):
        return per_rank_shape(size_bytes, dtype, nranks, send_whole=False)

    def busbw_factor(self, nranks):
        return (nranks - 1) / nranks

    def tuning_size(self, logged_bytes, nranks):
        return logged_bytes * nranks

    def in_place_send(self, recv, shape, rank):
        return recv[rank * shape.count : (rank + 1) * shape.count]

    def expected(self, shape, rank, nranks, op):
        index = arange(shape.recv_elems)
        return input_values(index % shape.count, index // shape.count, "none")

    def launch(self, send, recv, group, in_place, op):
        import torch.distributed as dist

        dist.all_gather_into_tensor(recv, send, group=group)

    def nccl_calls(self, send, recv, shape, dtype, op, rank, nranks, version):
        return [("ncclAllGather", (send, recv, shape.count, nccl_type(dtype)))]
