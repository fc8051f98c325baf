"""`run-engine --tuned`: the NCCL settings to apply, and untuned against tuned.

The settings come from a recommendation file (`ncclprobe recommend` writes it; only its `env`
is used) or, without a file, from a quick sweep of the engine's own all-reduce sizes, taken from
the untuned run's collective trace, recommended by the same code as `ncclprobe recommend`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.recipes import DEFAULT_GRID


def read_recommendation(path: str | Path) -> dict[str, str]:
    """The `env` of a recommendation file, validated (a one-line UsageProblem otherwise)."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageProblem(f"cannot read recommendation file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageProblem(f"recommendation file {path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "recommendation":
        raise UsageProblem(f"{path} is not a recommendation (expected \"kind\": \"recommendation\")")
    env = doc.get("env")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise UsageProblem(f"{path}: \"env\" must map variable names to string values")
    return dict(env)


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
    with tempfile.TemporaryDirectory(prefix="ncclprobe-tuned-") as tmp:
        path = Path(tmp) / "sweep.jsonl"
        run_job(new_job(spec, {}, str(path), ["run-engine", "--tuned"]), progress=progress)
        recommendation = build_recommendation([path], workload=workload)
        return recommendation.env, recommendation.to_json()
