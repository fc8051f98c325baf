"""Match an engine run's collectives with sweep measurements of the same sizes, settings and mode.

The engine's measured collective time per token is `collective_share × ms_per_token`; the sweep's
prediction is Σ over the engine's collective sizes of (calls per token × the sweep's median time
for that size). A sweep size within a factor of 2 stands in for a missing one (small collectives
are latency-bound, their time barely changes within 2×); anything further is "not covered".
"""

from __future__ import annotations

import math

from ncclprobe.diagnose import evidence as E
from ncclprobe.diagnose.commands import sizes_arg
from ncclprobe.diagnose.findings import Finding, NotChecked, RuledOut
from ncclprobe.nccl.recipes import only_shapes_the_log

NEAREST_FACTOR = 2.0


def tuning_settings(settings: dict | None) -> dict[str, str]:
    """The settings that change what NCCL does, without the debug/logging ones."""
    return {k: str(v) for k, v in (settings or {}).items() if not only_shapes_the_log(k)}


def run_settings(run: dict) -> dict[str, str]:
    """What was in force: the workers' environment at communicator creation when they agree,
    else what the run asked for."""
    eff = E.effective_settings(run)
    return tuning_settings(eff if eff is not None else run.get("settings"))


def sweep_time_us(sweep: list[dict], *, settings: dict, nranks: int | None, op: str, mode: str,
                  size: int) -> tuple[float, int] | None:
    """(median time in us, the size it was measured at) of the nearest matching sweep result."""
    candidates = [r for r in sweep if tuning_settings(r.get("settings")) == settings
                  and r.get("collective") == op and r.get("mode", "eager") == mode
                  and (nranks is None or r.get("nranks") in (None, nranks))]
    if not candidates:
        return None
    best = min(candidates, key=lambda r: abs(math.log(r["size_bytes"] / size)))
    if abs(math.log(best["size_bytes"] / size)) > math.log(NEAREST_FACTOR):
        return None
    return float(best["time_us"]), int(best["size_bytes"])


def compare_run(ev: E.Evidence, run: dict, name: str, hypothesis: str, excess: float):
    share, ms_token, tokens = run.get("collective_share"), run.get("ms_per_token"), run.get("new_tokens")
    sizes = (run.get("collectives") or {}).get("sizes") or []
    if share is None or not ms_token or not tokens or not sizes:
        return NotChecked(rule="collectives-vs-sweep", hypothesis=f"{name}: {hypothesis}",
                          missing="the run has no measured collective share or collective sizes")
    settings, nranks = run_settings(run), ev.config.get("tp")
    expected_ms, missing = 0.0, []
    for entry in sizes:
        mode = "graph" if entry.get("graph") else "eager"
        hit = sweep_time_us(ev.sweep, settings=settings, nranks=nranks, op=entry.get("op", "all_reduce"),
                            mode=mode, size=int(entry["size_bytes"]))
        if hit is None:
            missing.append(int(entry["size_bytes"]))
            continue
        expected_ms += entry.get("count", 0) * hit[0] / 1000.0
    if missing:
        label = ",".join(f"{k}={v}" for k, v in sorted(settings.items())) or "default settings"
        return NotChecked(rule="collectives-vs-sweep", hypothesis=f"{name}: {hypothesis}",
                          missing=f"the sweep has no {label} result within 2x of {sizes_arg(missing)} at {nranks} ranks",
                          next_command=f"ncclprobe sweep --nranks {nranks} --sizes {sizes_arg(missing)} --output sweep.jsonl")
    return _verdict(ev, run, name, hypothesis, excess, share * ms_token, expected_ms / tokens, settings)


def _verdict(ev, run, name, hypothesis, excess, measured, expected, settings):
    ratio = measured / expected if expected > 0 else math.inf
    nums = {"engine_collective_ms_per_token": round(measured, 4), "sweep_collective_ms_per_token": round(expected, 4),
            "ratio": round(ratio, 2) if math.isfinite(ratio) else None, "settings": settings}
    if ratio <= excess:
        return RuledOut(rule="collectives-vs-sweep", hypothesis=f"{name}: {hypothesis}",
                        reason=f"the engine's collectives cost {measured:.3f} ms per token, {ratio:.2f}x what the sweep "
                               f"measured for the same sizes and settings ({expected:.3f} ms)")
    eager = any(not s.get("graph") for s in (run.get("collectives") or {}).get("sizes") or [])
    sizes = sorted({int(s["size_bytes"]) for s in run["collectives"]["sizes"]})
    nxt = (f"ncclprobe probe graph-capture --sizes {sizes_arg(sizes)}" if eager else
           f"ncclprobe sweep --nranks {ev.config.get('tp')} --sizes {sizes_arg(sizes)} --mode graph --output sweep.jsonl")
    return Finding(
        rule="collectives-vs-sweep", severity="warning", confidence="medium",
        title=f"{name}: collectives cost {ratio:.1f}x what the sweep measured for the same sizes and settings",
        detail=(f"Measured in the engine: {measured:.3f} ms of collectives per token; the sweep predicts {expected:.3f} ms "
                f"for the same sizes, settings and eager/graph mode. The difference is outside NCCL's algorithm choice: "
                f"host-side cost of the eager path, waiting on a straggling rank, or contention with compute."),
        evidence=nums, cost_ms_per_token=measured - expected, next_command=nxt)
