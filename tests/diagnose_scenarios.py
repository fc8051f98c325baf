"""Scenario traces for the diagnose tests: the recorded ones, and edits of them for what a CPU
cannot record.

`recorded(name)` loads a trace recorded with `ncclprobe run-engine` (examples/traces/, each
command in the README there). Every other function below edits a copy of a recorded trace to plant
exactly one problem; its docstring says what it changes and why. None of them pretends to be a
recording: the graph cases need a GPU, and until a GPU run of `--graphs decode` is committed they
are built this way.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def recorded(name: str) -> dict:
    """A trace recorded with `ncclprobe run-engine` (examples/traces/README.md has each command)."""
    return json.loads((TRACES / name).read_text())


def healthy_trace() -> dict:
    return recorded("healthy.json")


def runs(trace, mode=None, label=None):
    return [
        r
        for r in trace["runs"]
        if (mode is None or r["mode"] == mode) and (label is None or r["label"] == label)
    ]


LLAMA3_8B = {
    "name": "llama3-8b",
    "hidden": 4096,
    "layers": 32,
    "vocab": 128256,
    "heads": 32,
    "kv_heads": 8,
    "moe": False,
    "experts": None,
    "top_k": None,
}


def as_gpu_run(trace: dict, decode_ms: float = 12.0) -> dict:
    """What a GPU run of the same loop looks like, for the graph scenarios a CPU cannot record:
    config set to cuda/bfloat16/nccl with the llama3-8b shape (the engine's preset summary), and
    every time scaled by one factor so the baseline decode step takes `decode_ms` (12 ms in the
    seed story); the tiny draft's path is dropped. Counts, acceptance and collectives are the
    recorded ones."""
    t = copy.deepcopy(trace)
    t["config"].update(
        device="cuda",
        dtype="bfloat16",
        backend="nccl",
        preset="llama3-8b",
        model=dict(LLAMA3_8B),
        draft=None,
    )
    scale = decode_ms / runs(t, "baseline")[0]["phases"]["decode"]["median_ms"]
    for run in t["runs"]:
        for rec in run["phases"].values():
            for key in ("total_ms", "median_ms", "p90_ms"):
                rec[key] = rec[key] * scale
        run["ms_per_token"] *= scale
        run["wall_s"] *= scale
        run["tokens_per_s"] /= scale
    return t


def make_seed_case(trace: dict, verify_factor: float = 2.4) -> dict:
    """The seed case, as `--graphs decode` produces it on a GPU: decode is a graph replay, verify runs
    eagerly and costs `verify_factor` x the decode step (29 ms vs 12 ms in the story). Changes:
    config.graphs = "decode"; the baseline decode phases marked graphed (`--graphs decode`
    captures the baseline decode only, so the draft phases stay eager too); the verify
    median/total scaled so verify/decode = verify_factor; the speculative run's tokens/s
    recomputed from its phase totals. Built on `as_gpu_run`: CUDA graphs exist only on a GPU."""
    t = as_gpu_run(trace)
    t["config"]["graphs"] = "decode"
    for run in runs(t, "baseline"):
        run["phases"]["decode"]["graphed"] = True
    decode_ms = runs(t, "baseline")[0]["phases"]["decode"]["median_ms"]
    for run in runs(t, "speculative"):
        verify = run["phases"]["verify"]
        verify["median_ms"] = decode_ms * verify_factor
        verify["p90_ms"] = verify["median_ms"] * 1.1
        verify["total_ms"] = verify["median_ms"] * verify["count"]
        run["verify_decode_ratio"] = verify_factor
        _retime(run)
    return t


def _retime(spec: dict) -> None:
    """Recompute a speculative run's speed from its phase totals (the wall time is their sum)."""
    total_ms = sum(p["total_ms"] for p in spec["phases"].values())
    ms_per_token = total_ms / spec["new_tokens"]
    spec["tokens_per_s"] *= spec["ms_per_token"] / ms_per_token
    spec["ms_per_token"] = ms_per_token
    spec["wall_s"] = total_ms / 1000.0


def lose_settings_on_rank(trace: dict, rank: int = 1) -> dict:
    """Settings lost on the way to one worker: remove every setting a run asked for from rank
    `rank`'s environment at communicator creation (e.g. a wrapper script that rebuilt the
    environment). The engine's own launcher always delivers them, so this cannot be recorded."""
    t = copy.deepcopy(trace)
    for run in t["runs"]:
        env = run["workers"][rank]["env_at_comm_init"]
        for key in run["settings"]:
            env.pop(key, None)
    return t


def make_all_graphed(trace: dict, verify_factor: float | None = None) -> dict:
    """`--graphs all`: every phase a graph replay; with verify_factor the captured verify step
    still costs that multiple of the decode step (a slow masked-attention path)."""
    t = make_seed_case(trace, verify_factor or 1.05)
    t["config"]["graphs"] = "all"
    for run in t["runs"]:
        for rec in run["phases"].values():
            rec["graphed"] = True
    return t
