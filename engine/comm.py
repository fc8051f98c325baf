"""The one communicator every engine collective goes through.

Model code never calls torch.distributed; `tp.apply_tp` hooks `Communicator.all_reduce` onto the
sharded modules. Keeping every collective behind this one object is what makes the runtime's
instrumentation honest and cheap:
- `listener(op, tensor)` is called on the host for each collective as it is issued, so a tracer
  sees every one (inside a CUDA graph capture it is called once, at capture; the graph runner
  then counts the captured collectives per replay);
- `enabled = False` turns the collectives into no-ops, which is how the runtime measures the
  share of step time they take (a timing-only variant whose outputs are discarded).

For one rank it is a no-op and reports nothing: no collective happens. It works inside CUDA
graph capture because it issues plain in-place `dist.all_reduce` calls, which ProcessGroupNCCL
records into the graph.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class Communicator:
    def __init__(
        self, rank: int = 0, world_size: int = 1, group=None, *, issue_single_rank: bool = False
    ):
        self.rank, self.world_size, self.group = rank, world_size, group
        # one rank normally skips its collectives; issuing them anyway (a real one-rank NCCL call,
        # nothing moved) lets a one-GPU machine measure and graph-capture the engine's all-reduces
        self.issue_single_rank = issue_single_rank
        self.enabled = True
        self.listener: Callable[[str, torch.Tensor], None] | None = None

    @property
    def active(self) -> bool:
        """Whether collectives are issued at all (more than one rank, or forced for one)."""
        return self.world_size > 1 or self.issue_single_rank

    @classmethod
    def from_default_group(cls, *, issue_single_rank: bool = False) -> Communicator:
        import torch.distributed as dist

        if not dist.is_initialized():
            return cls()
        return cls(
            dist.get_rank(),
            dist.get_world_size(),
            dist.group.WORLD,
            issue_single_rank=issue_single_rank,
        )

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over the ranks, in place; returns `x`."""
        if not self.active:
            return x
        return self._issue(x)

    def _issue(self, x: torch.Tensor) -> torch.Tensor:
        # kept out of torch.compile (a graph break, `keep_out_of_compile`): the listener is host
        # code, and the in-place all-reduce must stay the plain ProcessGroupNCCL call that CUDA-graph
        # capture records
        if self.listener is not None:
            self.listener("all_reduce", x)
        if self.enabled:
            import torch.distributed as dist

            dist.all_reduce(x, group=self.group)
        return x


def keep_out_of_compile() -> None:
    """Make the collective call a graph break for torch.compile: `graphs.compile_for_capture` calls
    this before it compiles. Marked then rather than by a decorator at import because
    `torch.compiler.disable` imports torch._dynamo: 1.4 s of the 3.1 s an engine worker spent
    importing on the 2-core machine (`python -X importtime`), and only --compile needs it."""
    issue = Communicator.__dict__["_issue"]
    if not getattr(issue, "_torchdynamo_disable", False):
        # the class's own method, replaced once by its compile-disabled wrapper (same signature)
        Communicator._issue = torch.compiler.disable(issue)  # type: ignore[method-assign]
