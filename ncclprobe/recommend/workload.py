"""The workload that weighs the global choice: how many collectives of each size a job issues.

Either a size list the user gives (each size counted once) or the collectives an engine run
really issued, read through the engine-run view (`ncclprobe.evidence.run`): an engine trace's
histogram, a profile's NCCL kernels (one per rank: sizes from the eager kernels' args), never a
file's keys directly. A decode all-reduce moves batch x hidden x dtype bytes, so a 7168-wide bf16
model issues 14 KiB all-reduces per token, and those sizes -- not a sweep's doubling grid --
decide which setting pays off.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import Label, Mode
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.sizes import parse_sizes


@dataclass(frozen=True)
class Workload:
    """Collective counts by size in bytes, and where they came from (for the report)."""

    counts: dict[int, float]
    source: str
    graphed_share: float | None = None  # fraction of the collectives issued inside CUDA graphs
    unknown_calls: float = 0.0  # calls whose size the evidence does not hold (not weighed)

    @property
    def total(self) -> float:
        return sum(self.counts.values())


def from_sizes(spec: str) -> Workload:
    """`--sizes 14K,56K,1M`: every listed size weighs the same."""
    return Workload(counts={size: 1.0 for size in parse_sizes(spec)}, source=f"sizes {spec}")


def uniform(sizes: list[int]) -> Workload:
    """No workload given: every measured size weighs the same (said so in the notes)."""
    return Workload(
        counts={size: 1.0 for size in sizes}, source="every measured size, weighted equally"
    )


def workload_runs(runs: list[EngineRun]) -> list[EngineRun]:
    """The runs that stand for the user's job: the untuned speculative runs if there are any
    (that is what is being tuned), else every untuned run, else every run."""
    untuned = [r for r in runs if r.label == Label.UNTUNED] or runs
    return [r for r in untuned if r.mode == Mode.SPECULATIVE] or untuned


def from_files(paths: list[str | Path], *, collective: str = "all_reduce") -> Workload:
    """The workload of an engine trace, profiles (one per rank) or a server log, told apart by content."""
    from ncclprobe.evidence.run import load_any

    runset = load_any(list(paths))
    names = ", ".join(str(p) for p in paths)
    return from_runs(runset.runs, collective=collective, source=f"{runset.kind} {names}")


def from_trace(
    trace: dict, *, collective: str = "all_reduce", source: str = "engine trace"
) -> Workload:
    """The workload of an engine-trace document in memory (run-engine --tuned's own run)."""
    from ncclprobe.evidence.run.trace import to_runs

    return from_runs(to_runs(trace), collective=collective, source=source)


def from_runs(
    runs: list[EngineRun], *, collective: str = "all_reduce", source: str = "engine run"
) -> Workload:
    """Sum the calls per size of `collective` over the workload runs. Calls of unknown size
    (replayed from a graph whose capture a profile does not hold) cannot be weighed: counted apart."""
    counts: dict[int, float] = {}
    graphed = unknown = 0.0
    chosen = workload_runs(runs)
    for run in chosen:
        for entry in run.collectives:
            if entry.op != collective or not entry.count:
                continue
            if not entry.size_bytes:
                unknown += entry.count
                continue
            size = int(entry.size_bytes)
            counts[size] = counts.get(size, 0.0) + float(entry.count)
            graphed += float(entry.count) if entry.graph else 0.0
    if not counts:
        why = (
            f" ({unknown:.0f} calls of unknown size, replayed from CUDA graphs)" if unknown else ""
        )
        kinds = {r.source for r in runs}
        if "server-log" in kinds:
            why = (
                " (a server log records no collectives; give the run's profile or an engine trace)"
            )
        raise UsageProblem(f"{source} has no {collective} collectives of known size{why}")
    labels = sorted({f"{r.label}/{r.mode or 'run'}" for r in chosen})
    return Workload(
        counts=dict(sorted(counts.items())),
        source=f"{source} ({', '.join(labels)} runs)",
        graphed_share=graphed / sum(counts.values()),
        unknown_calls=unknown,
    )
