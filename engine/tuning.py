"""`run-engine --tuned`: the NCCL settings to apply, and untuned against tuned.

The settings come from a recommendation file (`ncclprobe recommend` writes it; only its `env`
is used) or, without a file, from a quick sweep of the engine's own all-reduce sizes, taken from
the untuned run's collective trace, recommended by the same code as `ncclprobe recommend`.
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe import tempdirs
from ncclprobe.nccl.recipes import DEFAULT_GRID


def read_recommendation(path: str | Path) -> dict[str, str]:
    """The `env` of a recommendation file, validated by the one loader (`ncclprobe.recommend.file`)."""
    from ncclprobe.recommend.file import recommended_env
    return recommended_env(path, "--tuned")


def quick_sweep_settings(untuned_trace: dict, *, nranks: int, backend: str, graph_mode: bool,
                         progress=None) -> tuple[dict[str, str], dict]:
    """Sweep the default protocol x algorithm grid at the engine's own all-reduce sizes, recommend, return (env, recommendation)."""
    from ncclprobe.recommend.recommendation import build_recommendation
    from ncclprobe.recommend.workload import from_trace
    from ncclprobe.sweep.plan import SweepSpec
    from ncclprobe.sweep.session import new_job, run_job
    workload = from_trace(untuned_trace)
    spec = SweepSpec(grid=dict(DEFAULT_GRID), sizes=tuple(sorted(workload.counts)), nranks=nranks, backend=backend,
                     modes=("graph",) if graph_mode else ("eager",), in_place=(True,), iters=20, trials=3)
    with tempdirs.owned("ncclprobe-tuned-") as tmp:
        path = tmp / "sweep.jsonl"
        run_job(new_job(spec, {}, str(path), ["run-engine", "--tuned"]), progress=progress)
        recommendation = build_recommendation([path], workload=workload)
        return recommendation.env, recommendation.to_json()
