"""All-reduce (sum): every rank ends with the element-wise sum of all inputs.

busbw factor 2(n-1)/n: in a ring all-reduce each rank sends and receives 2(n-1)/n of the buffer
(reduce-scatter, then all-gather), whatever the algorithm (nccl-tests doc/PERFORMANCE.md).

torch has no out-of-place all-reduce: "out of place" here copies the input into the output
buffer and reduces that in place, which is what torch's functional all_reduce does; the copy is
part of the measured time, and the input stays untouched as in nccl-tests.
"""

from __future__ import annotations

from ncclprobe.probes.collectives.base import PATTERN, Collective, crafted_input


class AllReduce(Collective):
    name = "all_reduce"

    def busbw_factor(self, nranks: int) -> float:
        return 2.0 * (nranks - 1) / nranks

    def make_buffers(self, count, rank, nranks, dtype, device):
        inp = crafted_input(count, rank, dtype, device)
        return inp, inp.clone()

    def expected(self, count, rank, nranks, dtype, device):
        import torch
        index = torch.arange(count, device=device, dtype=torch.int64)
        # sum over r of ((i + r) % P + 1): whole cycles of P contribute P(P+1)/2 each
        cycles, rest = divmod(nranks, PATTERN)
        total = torch.full_like(index, cycles * PATTERN * (PATTERN + 1) // 2 + rest)
        for r in range(rest):
            total += (index + r) % PATTERN
        return total.to(dtype)

    def launch(self, inp, out, group, in_place: bool) -> None:
        import torch.distributed as dist
        if in_place:
            dist.all_reduce(inp, group=group)
        else:
            out.copy_(inp)
            dist.all_reduce(out, group=group)
