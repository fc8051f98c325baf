"""Broadcast from rank 0: every rank ends with rank 0's buffer.

busbw factor 1: all the data leaves the root, whose one link is the bottleneck (nccl-tests
doc/PERFORMANCE.md). torch's broadcast is in place only: "out of place" through torch copies the
root's input into its output buffer, then broadcasts that (the copy is timed on the root); the raw
NCCL path makes the real out-of-place ncclBroadcast call nccl-tests makes.
"""

from __future__ import annotations

from ncclprobe.nccl.names import nccl_function
from ncclprobe.probes.collectives.base import (
    Collective,
    arange,
    input_values,
    nccl_type,
    whole_shape,
)

ROOT = 0


class Broadcast(Collective):
    name, root = "broadcast", ROOT
    nccl_name = nccl_function(name)
    torch_note = "out of place through torch is a copy on the root plus an in-place broadcast"

    def shape(self, size_bytes, dtype, nranks):
        return whole_shape(size_bytes, dtype)

    def busbw_factor(self, nranks):
        return 1.0

    def expected(self, shape, rank, nranks, op):
        return input_values(arange(shape.recv_elems), ROOT, "none")

    def launch(self, send, recv, group, in_place, op):
        import torch.distributed as dist

        if not in_place and dist.get_rank(group) == ROOT:
            recv.copy_(send)
        dist.broadcast(recv, src=dist.get_global_rank(group, ROOT), group=group)

    def nccl_calls(self, send, recv, shape, dtype, op, rank, nranks, version):
        return [("ncclBroadcast", (send, recv, shape.count, nccl_type(dtype), ROOT))]
