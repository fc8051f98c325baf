"""Send/receive in a ring: rank r sends its buffer to rank r+1 and receives rank r-1's (nccl-tests'
sendrecv_perf pattern).

busbw factor 1: each rank's link carries the whole buffer once. Out of place only: sending and
receiving through one buffer races by construction. Point-to-point: NCCL runs no tuning model
for it, so NCCL_PROTO/NCCL_ALGO do not apply. With one rank the rank sends to itself.
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


class SendRecv(Collective):
    name, placements, tuned_by_nccl = "sendrecv", (False,), False
    nccl_name = nccl_function(name)
    moves_bytes_only = True

    def shape(self, size_bytes, dtype, nranks):
        return whole_shape(size_bytes, dtype)

    def busbw_factor(self, nranks):
        return 1.0

    def ranks_problem(self, nranks, path):
        if nranks == 1 and path == "torch":
            return "torch.distributed refuses a send to the sending rank itself (one rank; --path nccl can)"
        return None

    def expected(self, shape, rank, nranks, op):
        return input_values(arange(shape.recv_elems), (rank - 1) % nranks, "none")

    def launch(self, send, recv, group, in_place, op):
        import torch.distributed as dist

        rank, n = dist.get_rank(group), dist.get_world_size(group)
        ops = [
            dist.P2POp(dist.isend, send, dist.get_global_rank(group, (rank + 1) % n), group),
            dist.P2POp(dist.irecv, recv, dist.get_global_rank(group, (rank - 1) % n), group),
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    def nccl_calls(self, send, recv, shape, dtype, op, rank, nranks, version):
        kind = nccl_type(dtype)
        return [
            ("ncclGroupStart", ()),
            ("ncclSend", (send, shape.count, kind, (rank + 1) % nranks)),
            ("ncclRecv", (recv, shape.count, kind, (rank - 1) % nranks)),
            ("ncclGroupEnd", ()),
        ]
