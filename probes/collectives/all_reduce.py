"""All-reduce: every rank ends with the element-wise reduction of all inputs.

busbw factor 2(n-1)/n: in a ring all-reduce each rank sends and receives 2(n-1)/n of the buffer
(reduce-scatter, then all-gather), whatever the algorithm (nccl-tests doc/PERFORMANCE.md).

torch has no out-of-place all-reduce: "out of place" through torch copies the input into the
output buffer and reduces that in place, which is what torch's functional all_reduce does; the
copy is part of the measured time, and the input stays untouched as in nccl-tests. The raw NCCL
path (`--path nccl`) makes the real out-of-place call, as nccl-tests does.
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


class AllReduce(Collective):
    name, reduces = "all_reduce", True
    nccl_name = nccl_function(name)
    torch_note = "out of place through torch is a copy plus an in-place all-reduce (torch has no out-of-place form)"

    def shape(self, size_bytes, dtype, nranks):
        return whole_shape(size_bytes, dtype)

    def busbw_factor(self, nranks):
        return 2.0 * (nranks - 1) / nranks

    def expected(self, shape, rank, nranks, op):
        return reduce_values(arange(shape.recv_elems), nranks, op)

    def launch(self, send, recv, group, in_place, op):
        import torch.distributed as dist

        if not in_place:
            recv.copy_(send)
        dist.all_reduce(recv, op=torch_op(op), group=group)

    def nccl_calls(self, send, recv, shape, dtype, op, rank, nranks, version):
        return [("ncclAllReduce", (send, recv, shape.count, nccl_type(dtype), nccl_op(op)))]
