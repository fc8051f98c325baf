"""The one CUDA-graph capture idiom, used by the engine, the probes and the benchmarks.

torch's CUDA-graph docs ask for warm-up calls on a side stream before capture: whatever a call
creates lazily (cuBLAS handles and workspaces, NCCL channels and buffers, allocator blocks,
torch.compile specialisations) is created there, outside the graph; the current stream then waits
for the side stream, and the capture records only the steady-state work. Capturing without the
warm-up records the one-time setup or fails on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def capture_graph(
    capture: Callable[[], T],
    *,
    warmup: Callable[[], object] | None = None,
    warmups: int = 1,
    pool=None,
    synchronize: bool = True,
):
    """(graph, what `capture()` returned: the static outputs a replay overwrites).

    `warmups` calls of `warmup` (default: `capture` itself) run on a side stream first. `pool`: a
    memory pool to capture into (None: the graph's own). `synchronize`: wait for the device after the
    warm-up and after the capture (measurements want a quiet device; the engine's many captures do
    not need it)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            (warmup or capture)()
    torch.cuda.current_stream().wait_stream(side)
    if synchronize:
        torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        result = capture()
    if synchronize:
        torch.cuda.synchronize()
    return graph, result
