"""Scenario traces for the diagnose tests, and the edits that turn a healthy trace into each one.

`healthy_trace()` returns the engine trace recorded on CPU (examples/traces/healthy.json, command in
examples/traces/README.md) when it exists, else one written from the schema in docs/DESIGN.md.
Each `make_*` function below edits a copy of a trace to plant exactly one problem; its docstring
says what it changes and why. None of them pretends to be a recording: the graph cases need a GPU,
and until a GPU run of `--graphs decode` is committed they are built this way.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def _phase(count, median_ms, graphed=False):
    return {"count": count, "total_ms": count * median_ms, "median_ms": median_ms, "p90_ms": median_ms * 1.1,
            "graphed": graphed}


def _workers(env, tp=2):
    return [{"rank": r, "pid": 1000 + r, "env_at_comm_init": dict(env), "nccl_read": {}} for r in range(tp)]


def schema_trace() -> dict:
    """A healthy 2-rank trace written from the DESIGN.md schema: the speculative run is faster than
    the baseline, verify costs about what k+1 tokens explain, settings reached every worker."""
    sizes = lambda phase, n: [{"op": "all_reduce", "size_bytes": 256, "dtype": "float32", "count": n,
                               "phase": phase, "graph": None}]
    def run(mode, tps, phases, hist, coll):
        return {"label": "untuned", "mode": mode, "settings": {}, "tokens_per_s": tps, "ms_per_token": 1000 / tps,
                "new_tokens": 32, "wall_s": 32 / tps, "phases": phases,
                "verify_decode_ratio": None if mode == "baseline" else phases["verify"]["median_ms"] / 2.0,
                "acceptance": {"mean_length": None if mode == "baseline" else 2.6, "histogram": hist},
                "collectives": {"per_token_count": 4.0, "per_token_bytes": 1024.0, "sizes": coll},
                "collective_share": 0.08, "graph_coverage": 0.0, "workers": _workers({}), "tokens": [[1, 2, 3]]}
    base = run("baseline", 500.0, {"decode": _phase(32, 2.0), "host": _phase(32, 0.0)}, [0, 0, 0, 0],
               sizes("decode", 128))
    spec = run("speculative", 700.0, {"draft": _phase(36, 0.3), "verify": _phase(12, 2.2),
                                      "accept": _phase(12, 0.05), "draft_extend": _phase(12, 0.3),
                                      "host": _phase(12, 0.02)}, [1, 2, 4, 5], sizes("verify", 48))
    return {"schema_version": 1, "kind": "engine-trace", "provenance": {},
            "config": {"preset": "tiny", "tp": 2, "batch": 1, "k": 3, "prompt_len": 16, "new_tokens": 32,
                       "temperature": 0.0, "seed": 0, "graphs": "none", "draft_tp": False, "dtype": "float32",
                       "device": "cpu", "backend": "gloo",
                       "model": {"hidden": 64, "layers": 2, "vocab": 256, "moe": False}},
            "runs": [base, spec]}


def healthy_trace() -> dict:
    recorded = TRACES / "healthy.json"
    if recorded.exists():
        return json.loads(recorded.read_text())
    return schema_trace()


def runs(trace, mode=None, label=None):
    return [r for r in trace["runs"] if (mode is None or r["mode"] == mode) and (label is None or r["label"] == label)]


LLAMA3_8B = {"name": "llama3-8b", "hidden": 4096, "layers": 32, "vocab": 128256, "heads": 32, "kv_heads": 8,
             "moe": False, "experts": None, "top_k": None}


def as_gpu_run(trace: dict, decode_ms: float = 12.0) -> dict:
    """What a GPU run of the same loop looks like, for the graph scenarios a CPU cannot record:
    config set to cuda/bfloat16/nccl with the llama3-8b shape (the engine's preset summary), and
    every time scaled by one factor so the baseline decode step takes `decode_ms` (12 ms in the
    seed story). Counts, acceptance and collectives are the recorded ones."""
    t = copy.deepcopy(trace)
    t["config"].update(device="cuda", dtype="bfloat16", backend="nccl", preset="llama3-8b", model=dict(LLAMA3_8B))
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


def make_tuned_pair(trace: dict, settings: dict, *, reached: bool = True) -> dict:
    """Add a "tuned" copy of every run that asks for `settings`. With reached=True its workers had
    them at communicator creation, as a working `--tuned` does; with reached=False they did not:
    the settings were lost between the launcher and the workers."""
    t = copy.deepcopy(trace)
    for run in list(t["runs"]):
        tuned = copy.deepcopy(run)
        tuned["label"], tuned["settings"] = "tuned", dict(settings)
        if reached:
            for worker in tuned["workers"]:
                worker["env_at_comm_init"].update(settings)
        t["runs"].append(tuned)
    return t


def make_not_propagated(trace: dict, settings: dict, lost_on_rank: int = 1) -> dict:
    """`--tuned` whose settings reached every worker but one: rank `lost_on_rank` created its
    communicator without them (e.g. a wrapper script that rebuilt the environment)."""
    t = make_tuned_pair(trace, settings, reached=True)
    for run in runs(t, label="tuned"):
        env = run["workers"][lost_on_rank]["env_at_comm_init"]
        for key in settings:
            env.pop(key, None)
    return t


def make_set_after_init(trace: dict, settings: dict) -> dict:
    """The worker set the settings in its own environment after it created its communicator: the
    environment at creation lacks them, a later snapshot (`env_after_comm_init`) has them."""
    t = make_tuned_pair(trace, settings, reached=False)
    for run in runs(t, label="tuned"):
        for worker in run["workers"]:
            worker["env_after_comm_init"] = {**worker["env_at_comm_init"], **settings}
    return t


def make_inherited_settings(trace: dict, settings: dict) -> dict:
    """"Untuned" was never untuned: the shell exported `settings`, so the untuned workers created
    (and captured) their communicators under the same settings the tuned run asked for."""
    t = make_tuned_pair(trace, settings, reached=True)
    for run in runs(t, label="untuned"):
        for worker in run["workers"]:
            worker["env_at_comm_init"].update(settings)
    return t


def make_collective_bound(trace: dict, share: float = 0.7) -> dict:
    """Collectives take `share` of every run's step time (a wide model over a slow link)."""
    t = copy.deepcopy(trace)
    for run in t["runs"]:
        run["collective_share"] = share
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
