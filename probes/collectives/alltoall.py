"""All-to-all: rank r sends piece j of its buffer to rank j and receives rank j's piece r.

nccl-tests' size is one rank's whole buffer, n pieces of `count` elements (`AlltoAllGetCollByteCount`),
busbw factor (n-1)/n: each rank exchanges the n-1 pieces that are not its own. Out of place only:
over one buffer every rank would overwrite pieces its peers are still reading, and torch's
`all_to_all_single` has no in-place form (nccl-tests times one anyway). NCCL runs it as grouped
point-to-point sends and receives (NCCL_PROTO/NCCL_ALGO do not apply); the raw NCCL path issues
exactly those, as nccl-tests does before NCCL 2.28's ncclAlltoAll.
"""

from __future__ import annotations

from ncclprobe.nccl.names import nccl_function
from ncclprobe.probes.collectives.base import (
    Collective,
    Shape,
    arange,
    cupy_types,
    element_size,
    input_values,
)


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

    def launch_nccl(self, comm, send, recv, shape, dtype, op, stream):
        from cupy.cuda import nccl

        kind, _ = cupy_types(dtype, "sum")
        step = shape.count * element_size(dtype)
        nccl.groupStart()
        for peer in range(comm.size()):
            comm.send(send.data_ptr() + peer * step, shape.count, kind, peer, stream)
            comm.recv(recv.data_ptr() + peer * step, shape.count, kind, peer, stream)
        nccl.groupEnd()
