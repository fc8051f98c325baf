"""All-to-all: rank r sends piece j of its buffer to rank j and receives rank j's piece r.

nccl-tests' size is one rank's whole buffer, n pieces of `count` elements (`AlltoAllGetCollByteCount`),
busbw factor (n-1)/n: each rank exchanges the n-1 pieces that are not its own. Out of place only:
over one buffer every rank would overwrite pieces its peers are still reading, and torch's
`all_to_all_single` has no in-place form (nccl-tests times one anyway). NCCL runs it as grouped
point-to-point sends and receives (NCCL_PROTO/NCCL_ALGO do not apply). The raw NCCL path makes
nccl-tests' call: ncclAlltoAll from NCCL 2.28 on, grouped sends and receives before.
"""

from __future__ import annotations

from ncclprobe.nccl.names import nccl_function
from ncclprobe.probes.collectives.base import (
    Collective,
    Shape,
    arange,
    element_size,
    input_values,
    nccl_type,
)
from ncclprobe.probes.nccl_ctypes import ALLTOALL_SINCE


class AlltoAll(Collective):
    name, placements, tuned_by_nccl = "alltoall", (False,), False
    nccl_name = nccl_function(name)

    def shape(self, size_bytes, dtype, nranks):
        count = max(1, size_bytes // (element_size(dtype) * nranks))
        whole = count * nranks
        return Shape(
            size_bytes=whole * element_size(dtype), count=count, send_elems=whole, recv_elems=whole
        )

    def busbw_factor(self, nranks):
        return (nranks - 1) / nranks

    def expected(self, shape, rank, nranks, op):
        index = arange(shape.recv_elems)
        source = index // shape.count  # piece j came from rank j: its piece `rank`
        return input_values(index % shape.count + rank * shape.count, source, "none")

    def launch(self, send, recv, group, in_place, op):
        import torch.distributed as dist

        dist.all_to_all_single(recv, send, group=group)

    def nccl_calls(self, send, recv, shape, dtype, op, rank, nranks, version):
        kind = nccl_type(dtype)
        if version >= ALLTOALL_SINCE:  # nccl-tests calls ncclAlltoAll from 2.28 on
            return [("ncclAlltoAll", (send, recv, shape.count, kind))]
        step = shape.count * element_size(dtype)
        pairs = [
            call
            for peer in range(nranks)
            for call in (
                ("ncclSend", (send + peer * step, shape.count, kind, peer)),
                ("ncclRecv", (recv + peer * step, shape.count, kind, peer)),
            )
        ]
        return [("ncclGroupStart", ()), *pairs, ("ncclGroupEnd", ())]
