"""Match an engine run's collectives with sweep measurements of the same sizes, settings and mode.

The engine's measured collective time per token is `collective_share × ms_per_token`; the sweep's
prediction is Σ over the engine's collective sizes of (calls per token × the sweep's median time
for that size). A sweep size within a factor of 2 stands in for a missing one (small collectives
are latency-bound, their time barely changes within 2×); anything further is "not covered".
"""

from __future__ import annotations

import math

from ncclprobe.diagnose.commands import sizes_arg, sweep_command
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, NotChecked, RuledOut
from ncclprobe.nccl.recipes import only_shapes_the_log
from ncclprobe.records import ResultRecord

NEAREST_FACTOR = 2.0


def tuning_settings(settings: dict | None) -> dict[str, str]:
    """The settings that change what NCCL does, without the debug/logging ones."""
    return {k: str(v) for k, v in (settings or {}).items() if not only_shapes_the_log(k)}


def run_settings(run) -> dict[str, str]:
    """What was in force: the workers' environment at communicator creation when they agree,
    else what the run asked for (a profile or log records none: NCCL's defaults, as far as known)."""
    eff = run.effective_settings()
    return tuning_settings(eff if eff is not None else run.settings)


def sweep_time_us(
    sweep: list[ResultRecord],
    *,
    settings: dict,
    nranks: int | None,
    op: str,
    mode: str,
    size: int,
) -> tuple[float, int] | None:
    """(median time in us, the size it was measured at) of the nearest matching sweep result."""
    candidates = [
        r
        for r in sweep
        if tuning_settings(r.settings) == settings
        and r.collective == op
        and r.mode == mode
        and (nranks is None or r.nranks in (None, nranks))
    ]
    if not candidates:
        return None
    best = min(candidates, key=lambda r: abs(math.log(r.size_bytes / size)))
    if abs(math.log(best.size_bytes / size)) > math.log(NEAREST_FACTOR):
        return None
    return float(best.time_us), int(best.size_bytes)


def compare_run(ev: E.Evidence, run, name: str, hypothesis: str, excess: float):
    share, ms_token, tokens = run.collective_share, run.ms_per_token, run.new_tokens
    sizes = [c for c in run.collectives if c.size_bytes]
    if share is None or not ms_token or not tokens or not sizes:
        return NotChecked(
            rule="collectives-vs-sweep",
            hypothesis=f"{name}: {hypothesis}",
            missing="the run has no measured collective share or collective sizes",
        )
    settings, nranks = run_settings(run), ev.config.get("tp")
    expected_ms, missing = 0.0, []
    for entry in sizes:
        mode = "eager" if entry.eager else "graph"
        hit = sweep_time_us(
            ev.sweep,
            settings=settings,
            nranks=nranks,
            op=entry.op,
            mode=mode,
            size=int(entry.size_bytes),
        )
        if hit is None:
            missing.append(int(entry.size_bytes))
            continue
        expected_ms += entry.count * hit[0] / 1000.0
    if missing:
        label = ",".join(f"{k}={v}" for k, v in sorted(settings.items())) or "default settings"
        return NotChecked(
            rule="collectives-vs-sweep",
            hypothesis=f"{name}: {hypothesis}",
            missing=f"the sweep has no {label} result within 2x of {sizes_arg(missing)} at {nranks} ranks",
            next_command=sweep_command(nranks, sizes_arg(missing)),
        )
    return _verdict(
        ev, run, name, hypothesis, excess, share * ms_token, expected_ms / tokens, settings
    )


def _verdict(ev, run, name, hypothesis, excess, measured, expected, settings):
    ratio = measured / expected if expected > 0 else math.inf
    nums = {
        "engine_collective_ms_per_token": round(measured, 4),
        "sweep_collective_ms_per_token": round(expected, 4),
        "ratio": round(ratio, 2) if math.isfinite(ratio) else None,
        "settings": settings,
    }
    if ratio <= excess:
        return RuledOut(
            rule="collectives-vs-sweep",
            hypothesis=f"{name}: {hypothesis}",
            reason=f"the engine's collectives cost {measured:.3f} ms per token, {ratio:.2f}x what the sweep "
            f"measured for the same sizes and settings ({expected:.3f} ms)",
        )
    eager = any(c.eager for c in run.collectives)
    sizes = run.collective_sizes()
    if (
        ev.config.get("backend") == "gloo"
    ):  # no CUDA graphs, no NCCL: the sweep again, under the same load
        nxt = (
            sweep_command(ev.config.get("tp"), sizes_arg(sizes))
            + "  # gloo: rerun beside the engine's load"
        )
    elif eager:
        nxt = f"ncclprobe probe graph-capture --sizes {sizes_arg(sizes)}"
    else:
        nxt = sweep_command(ev.config.get("tp"), sizes_arg(sizes), "--mode", "graph")
    return Finding(
        rule="collectives-vs-sweep",
        severity="warning",
        confidence="medium",
        title=f"{name}: collectives cost {ratio:.1f}x what the sweep measured for the same sizes and settings",
        detail=(
            f"Measured in the engine: {measured:.3f} ms of collectives per token; the sweep predicts {expected:.3f} ms "
            f"for the same sizes, settings and eager/graph mode. The difference is outside NCCL's algorithm choice: "
            f"host-side cost of the eager path, waiting on a straggling rank, or contention with compute."
        ),
        evidence=nums,
        cost_ms_per_token=measured - expected,
        next_command=nxt,
    )


def compare_calls(ev: E.Evidence, run, name: str, hypothesis: str, excess: float) -> list:
    """A profile's collectives, per size, against the sweep: the kernel time per call (GPU time,
    without the host's launch path) against the sweep's graph-mode time at that size when it has
    one (also GPU time between CUDA events), else its eager time (which includes the launch path,
    so it flatters the profile). The profile records no NCCL settings: the sweep's default
    configuration is the match, and its best configuration at that size is named beside it."""
    out, missing = [], []
    nranks = ev.config.get("tp")
    for c in run.collectives:
        if not c.size_bytes or not c.time_us or not c.count:
            continue
        per_call = c.time_us / c.count
        hit = sweep_time_us(
            ev.sweep, settings={}, nranks=nranks, op=c.op, mode="graph", size=c.size_bytes
        )
        mode = "graph"
        if hit is None:
            hit, mode = (
                sweep_time_us(
                    ev.sweep, settings={}, nranks=nranks, op=c.op, mode="eager", size=c.size_bytes
                ),
                "eager",
            )
        if hit is None:
            missing.append(c.size_bytes)
            continue
        best = _best_at(ev.sweep, nranks, c.op, c.size_bytes)
        ratio = per_call / hit[0] if hit[0] else math.inf
        hyp = f"{name}: {c.op} {sizes_arg([c.size_bytes])} calls cost more than the sweep measured"
        nums = {
            "size_bytes": c.size_bytes,
            "profile_us_per_call": round(per_call, 3),
            "sweep_us": hit[0],
            "sweep_size_bytes": hit[1],
            "sweep_mode": mode,
            "launched": f"{c.algo}/{c.proto}" if c.algo else None,
            "sweep_best": best,
        }
        if ratio <= excess:
            out.append(
                RuledOut(
                    rule="collectives-vs-sweep",
                    hypothesis=hyp,
                    reason=f"{per_call:.2f} us per call in the profile, {ratio:.2f}x the sweep's default "
                    f"{hit[0]:.2f} us ({mode}) at {sizes_arg([hit[1]])}",
                )
            )
            continue
        out.append(
            Finding(
                rule="collectives-vs-sweep",
                severity="warning",
                confidence="medium",
                title=f"{name}: {c.op} of {sizes_arg([c.size_bytes])} takes {per_call:.2f} us per call, "
                f"{ratio:.1f}x the sweep's {hit[0]:.2f} us",
                detail=(
                    f"The profile's kernel time per call is GPU time; the sweep measured {hit[0]:.2f} us in "
                    f"{mode} mode "
                    f"with NCCL's defaults (the profile records no settings). The kernel here is named "
                    f"{c.algo or '?'}/{c.proto or '?'} (its name, not proof of the protocol it ran)"
                    + (
                        f"; the sweep's best at this size is {best['config']} at "
                        f"{best['time_us']:.2f} us"
                        if best
                        else ""
                    )
                    + ". A kernel slower on the engine's GPU than alone points at contention with compute "
                    "or a rank that "
                    "arrives late (the kernel waits for its peers)."
                ),
                evidence=nums,
                cost_ms_per_step=(per_call - hit[0]) * c.count / 1000.0,
            )
        )
    if missing:
        out.append(
            NotChecked(
                rule="collectives-vs-sweep",
                hypothesis=f"{name}: {hypothesis}",
                missing=f"the sweep has no default-settings result within 2x of {sizes_arg(missing)}",
                next_command=(
                    f"ncclprobe sweep --nranks {nranks or 2} --sizes {sizes_arg(missing)} "
                    "--output sweep.jsonl"
                ),
            )
        )
    if not out:
        out.append(
            NotChecked(
                rule="collectives-vs-sweep",
                hypothesis=f"{name}: {hypothesis}",
                missing="collectives with known sizes and times in the profile",
            )
        )
    return out


def _best_at(sweep: list[ResultRecord], nranks, op: str, size: int) -> dict | None:
    rows = [
        r
        for r in sweep
        if r.collective == op
        and r.size_bytes == size
        and (nranks is None or r.nranks in (None, nranks))
    ]
    if not rows:
        return None
    best = min(rows, key=lambda r: r.time_us)
    return {"config": best.config_id, "time_us": best.time_us, "mode": best.mode}
