"""The workload that weighs the global choice: how many collectives of each size a job issues.

Either a size list the user gives (each size counted once) or the engine trace's real histogram
(`runs[*].collectives.sizes`, docs/DESIGN.md): a decode all-reduce moves batch x hidden x dtype
bytes, so a 7168-wide bf16 model issues 14 KiB all-reduces per token, and those sizes -- not a
sweep's doubling grid -- decide which setting pays off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.sizes import parse_sizes


@dataclass(frozen=True)
class Workload:
    """Collective counts by size in bytes, and where they came from (for the report)."""

    counts: dict[int, float]
    source: str
    graphed_share: float | None = None   # fraction of the collectives issued inside CUDA graphs

    @property
    def total(self) -> float:
        return sum(self.counts.values())


def from_sizes(spec: str) -> Workload:
    """`--sizes 14K,56K,1M`: every listed size weighs the same."""
    return Workload(counts={size: 1.0 for size in parse_sizes(spec)}, source=f"sizes {spec}")


def uniform(sizes: list[int]) -> Workload:
    """No workload given: every measured size weighs the same (said so in the notes)."""
    return Workload(counts={size: 1.0 for size in sizes}, source="every measured size, weighted equally")


def read_trace(path: str | Path) -> dict:
    """Load an engine trace, or raise UsageProblem naming what is wrong with the file."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageProblem(f"cannot read engine trace {str(path)!r}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise UsageProblem(f"engine trace {str(path)!r} is not JSON: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(doc, dict) or doc.get("kind") != "engine-trace":
        raise UsageProblem(f"{str(path)!r} is not an engine trace (its kind is not \"engine-trace\")")
    if doc.get("schema_version") != 1:
        raise UsageProblem(f"engine trace {str(path)!r} has schema version {doc.get('schema_version')!r}; this ncclprobe reads 1")
    return doc


def workload_runs(trace: dict) -> list[dict]:
    """The runs that stand for the user's job: the untuned speculative runs if there are any
    (that is what is being tuned), else every untuned run, else every run."""
    runs = [r for r in trace.get("runs") or [] if isinstance(r, dict)]
    untuned = [r for r in runs if r.get("label", "untuned") == "untuned"] or runs
    return [r for r in untuned if r.get("mode") == "speculative"] or untuned


def from_trace(trace: dict, *, collective: str = "all_reduce", source: str = "engine trace") -> Workload:
    """Sum `count` per `size_bytes` over the workload runs' collective histograms for `collective`."""
    counts: dict[int, float] = {}
    graphed = 0.0
    runs = workload_runs(trace)
    for run in runs:
        for entry in (run.get("collectives") or {}).get("sizes") or []:
            if entry.get("op") != collective or not entry.get("size_bytes") or not entry.get("count"):
                continue
            size = int(entry["size_bytes"])
            counts[size] = counts.get(size, 0.0) + float(entry["count"])
            graphed += float(entry["count"]) if entry.get("graph") else 0.0
    if not counts:
        raise UsageProblem(f"{source} has no {collective} collectives in its runs' collectives.sizes histogram")
    labels = sorted({f"{r.get('label', '?')}/{r.get('mode', '?')}" for r in runs})
    return Workload(counts=dict(sorted(counts.items())), source=f"{source} ({', '.join(labels)} runs)",
                    graphed_share=graphed / sum(counts.values()))
