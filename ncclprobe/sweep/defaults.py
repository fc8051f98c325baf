"""The one home of the sweep's defaults: what it measures when not told otherwise (`CHOICES`), and
how hard it measures each size, by where it runs (`Effort`).

The command line's options, `build.SweepRequest` and `plan.SweepSpec` take their defaults from
`CHOICES`, so each is written once. `sweep` picks an `Effort` when the user leaves sizes, warm-up,
iterations, trials or modes unset (`ncclprobe.sweep.build`); `run-engine --tuned` measures its
quick sweep with `QUICK`, and a `SweepSpec` built without any uses `CPU`'s counts. The grid's
default protocol x algorithm values are NCCL knowledge and live with it
(`ncclprobe.nccl.recipes.DEFAULT_GRID`).
"""

from __future__ import annotations

from dataclasses import dataclass

UNSET = "default"  # a grid value: leave the variable unset


@dataclass(frozen=True)
class Choices:
    """What a sweep measures wherever it runs, unless told otherwise."""

    collectives: tuple[str, ...] = ("all_reduce",)
    dtypes: tuple[str, ...] = ("float32",)
    ops: tuple[str, ...] = ("sum",)  # reduction ops of the reducing collectives
    placement: str = "both"  # both | in | out
    agg: int = 1  # collectives per iteration, in one NCCL group (nccl-tests -m)
    check: bool = True  # the exact correctness pass (nccl-tests -c)
    buffers: str = "rotate"  # rotate through a largest-message buffer (nccl-tests) or reuse one
    path: str = "torch"  # torch.distributed, or NCCL's own calls through ctypes
    iter_events: bool = True  # a CUDA event per eager iteration (per-iteration statistics)
    cost_split: bool = True  # eager NCCL rows also timed through the other path (cost_split)
    p2p_levels: tuple[str, ...] = (UNSET,)
    backend: str = "auto"  # auto | nccl | gloo
    timeout_s: float = 120.0  # longest a pool may stay silent before it counts as hung


CHOICES = Choices()


@dataclass(frozen=True)
class Effort:
    sizes: str | None  # the --sizes default (None: the caller gives them)
    warmup: int  # untimed iterations per size
    iters: int  # iterations per timed trial (a graph captures them all)
    trials: int  # timed trials per size
    modes: tuple[str, ...]  # eager and/or graph (graph is skipped on gloo, with the reason)


# graph is asked for on CPU too, so the output states why it was skipped instead of staying silent
CPU = Effort(sizes="64..1M:16", warmup=2, iters=5, trials=3, modes=("eager", "graph"))
# 100 iterations: a graph of 100 calls amortises the replay's own start over them (docs/METRICS.md)
GPU = Effort(sizes="8..1G", warmup=5, iters=100, trials=5, modes=("eager", "graph"))
# ranks sharing one GPU over sockets are slow and their times mean little: a few sizes suffice
SHARED_GPU = Effort(sizes="1K..1M:32", warmup=2, iters=5, trials=3, modes=("eager", "graph"))
# run-engine --tuned: the engine's own sizes, in its own mode, in place, enough calls to rank them
QUICK = Effort(sizes=None, warmup=2, iters=20, trials=3, modes=("eager",))
