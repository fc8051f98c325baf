"""Match an engine run's collectives with sweep measurements of the same sizes, settings and mode.

The engine's measured collective time per token is `collective_share × ms_per_token`; the sweep's
prediction is Σ over the engine's collective sizes of (calls per token × the sweep's median time
for that size). A sweep size within a factor of 2 stands in for a missing one, as a bound: a
collective's time grows with its size, at most in proportion (a fixed latency plus a bandwidth
term), so a stand-in s' for the engine's size s puts the time at s between t(s') and t(s') × s/s'
(for s > s'; the other way round below). A verdict holds only where it holds over that whole
range: the stand-in alone can neither trigger nor clear "2x the sweep". Anything further than 2x is
"not covered".
"""

from __future__ import annotations

import math

from ncclprobe.diagnose.commands import NEAREST_FACTOR, sizes_arg, sweep_command, sweep_next
from ncclprobe.diagnose.run.ledger import COLLECTIVE
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import Cost, Finding, NotChecked, Outcome, RuledOut
from ncclprobe.nccl.recipes import only_shapes_the_log
from ncclprobe.records import ResultRecord


def tuning_settings(settings: dict | None) -> dict[str, str]:
    """The settings that change what NCCL does, without the debug/logging ones."""
    return {k: str(v) for k, v in (settings or {}).items() if not only_shapes_the_log(k)}


def run_settings(run: EngineRun) -> dict[str, str]:
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
    return best.timed_us, best.size_bytes


def time_bounds(hit: tuple[float, int], size: int) -> tuple[float, float]:
    """(least, most) time a call of `size` bytes can take, from the sweep's time at its stand-in
    size (see the module docstring): equal bounds when the sweep measured that size itself."""
    time_us, measured_at = hit
    scale = size / measured_at
    return time_us * min(1.0, scale), time_us * max(1.0, scale)


def compare_run(
    ev: E.Evidence, run: EngineRun, name: str, hypothesis: str, excess: float
) -> Outcome:
    share, ms_token, tokens = run.collective_share, run.ms_per_token, run.new_tokens
    sizes = [(c, c.size_bytes) for c in run.collectives if c.size_bytes]
    if share is None or not ms_token or not tokens or not sizes:
        return NotChecked(
            rule="collectives-vs-sweep",
            hypothesis=f"{name}: {hypothesis}",
            missing="the run has no measured collective share or collective sizes",
        )
    settings, nranks = run_settings(run), ev.config.get("tp")
    expected_ms, missing = [0.0, 0.0], []
    for entry, size in sizes:
        mode = "eager" if entry.eager else "graph"
        hit = sweep_time_us(
            ev.sweep, settings=settings, nranks=nranks, op=entry.op, mode=mode, size=size
        )
        if hit is None:
            missing.append(size)
            continue
        least, most = time_bounds(hit, size)
        expected_ms = [
            expected_ms[0] + entry.count * least / 1000.0,
            expected_ms[1] + entry.count * most / 1000.0,
        ]
    if missing:
        label = ",".join(f"{k}={v}" for k, v in sorted(settings.items())) or "default settings"
        return NotChecked(
            rule="collectives-vs-sweep",
            hypothesis=f"{name}: {hypothesis}",
            missing=f"the sweep has no {label} result within 2x of {sizes_arg(missing)} at {nranks} ranks",
            next_command=sweep_next(ev, missing),
        )
    return _verdict(
        ev,
        run,
        name,
        hypothesis,
        excess,
        share * ms_token,
        (expected_ms[0] / tokens, expected_ms[1] / tokens),
        settings,
    )


def _verdict(
    ev: E.Evidence,
    run: EngineRun,
    name: str,
    hypothesis: str,
    excess: float,
    measured: float,
    expected: tuple[float, float],
    settings: dict[str, str],
) -> Outcome:
    least, most = expected
    ratio = measured / most if most > 0 else math.inf  # the least the ratio can be
    highest = measured / least if least > 0 else math.inf
    stand_in = least != most
    nums = {
        "engine_collective_ms_per_token": round(measured, 4),
        "sweep_collective_ms_per_token": round(most, 4),
        "ratio": round(ratio, 2) if math.isfinite(ratio) else None,
        "settings": settings,
    }
    if stand_in:
        nums.update(
            sweep_collective_ms_per_token_least=round(least, 4),
            ratio_most=round(highest, 2) if math.isfinite(highest) else None,
        )
    if highest <= excess:
        return RuledOut(
            rule="collectives-vs-sweep",
            hypothesis=f"{name}: {hypothesis}",
            reason=f"the engine's collectives cost {measured:.3f} ms per token, {highest:.2f}x what the sweep "
            f"measured for the same sizes and settings ({least:.3f} ms)"
            + (" at most, with sweep sizes standing in within 2x" if stand_in else ""),
        )
    if ratio <= excess:
        return NotChecked(
            rule="collectives-vs-sweep",
            hypothesis=f"{name}: {hypothesis}",
            missing=f"the sweep's time at the engine's own sizes: with sizes within 2x standing in, the "
            f"engine's {measured:.3f} ms per token is between {ratio:.2f}x and {highest:.2f}x the sweep, "
            f"across the {excess:.1f}x cut",
            next_command=sweep_command(ev.config.get("tp"), sizes_arg(run.collective_sizes())),
        )
    predicted = most
    eager = any(c.eager for c in run.collectives)
    sizes = run.collective_sizes()
    if (
        ev.config.get("backend") == "gloo"
    ):  # no CUDA graphs, no NCCL: the sweep again, under the same load
        nxt = (
            sweep_command(
                ev.config.get("tp"), sizes_arg(sizes), "--proto", "default", "--algo", "default"
            )
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
            f"Measured in the engine: {measured:.3f} ms of collectives per token; the sweep predicts "
            f"{predicted:.3f} ms for the same sizes, settings and eager/graph mode"
            + (" (at most: sweep sizes within 2x stand in)" if stand_in else "")
            + ". What NCCL chose in the engine is not in this evidence: with NCCL_DEBUG_SUBSYS=TUNING in "
            "both runs the log shows whether its algorithm and protocol differ from the sweep's. Other "
            "causes it cannot tell apart: the host-side cost of the eager path, waiting for a rank that "
            "arrives late, contention with compute."
        ),
        evidence=nums,
        cost=Cost.measured(
            max(0.0, measured - most),
            "token",
            "the engine's collective time per token above what the sweep measured for the same "
            "sizes and settings" + (" (sizes within 2x standing in: a range)" if stand_in else ""),
            high=max(0.0, measured - least),
            run=name,
            covers=(COLLECTIVE, "excess"),
            total_ms=max(0.0, measured - least) * run.new_tokens if run.new_tokens else None,
        ),
        next_command=nxt,
    )


def compare_calls(
    ev: E.Evidence, run: EngineRun, name: str, hypothesis: str, excess: float
) -> list:
    """A profile's collectives, per size, against the sweep: the kernel time per call (GPU time,
    without the host's launch path) against the sweep's graph-mode time at that size when it has
    one (also GPU time between CUDA events), else its eager time (which includes the launch path,
    so it flatters the profile). The profile records no NCCL settings: the sweep's default
    configuration is the match, and its best configuration at that size is named beside it."""
    out: list[Outcome] = []
    missing = []
    nranks = ev.config.get("tp")
    for c in run.collectives:
        if not c.size_bytes or not c.time_us or not c.count:
            continue
        if c.library is not None and c.library not in ("NCCL", "RCCL", "gloo"):
            continue  # the sweep measures NCCL (or gloo through torch): not this library's kernels
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
        least, most = time_bounds(hit, c.size_bytes)
        ratio = per_call / most if most else math.inf
        highest = per_call / least if least else math.inf
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
        if highest <= excess:
            out.append(
                RuledOut(
                    rule="collectives-vs-sweep",
                    hypothesis=hyp,
                    reason=f"{per_call:.2f} us per call in the profile, {highest:.2f}x the sweep's default "
                    f"{hit[0]:.2f} us ({mode}) at {sizes_arg([hit[1]])}"
                    + (" at most (a stand-in size within 2x)" if hit[1] != c.size_bytes else ""),
                )
            )
            continue
        if ratio <= excess:  # the stand-in size leaves the verdict open
            out.append(
                NotChecked(
                    rule="collectives-vs-sweep",
                    hypothesis=hyp,
                    missing=f"the sweep's time at {sizes_arg([c.size_bytes])} itself: its {sizes_arg([hit[1]])} "
                    f"standing in puts {per_call:.2f} us per call between {ratio:.2f}x and {highest:.2f}x, "
                    f"across the {excess:.1f}x cut",
                    next_command=f"ncclprobe sweep --nranks {nranks or 2} --sizes "
                    f"{sizes_arg([c.size_bytes])} --output sweep.jsonl",
                )
            )
            continue
        out.append(
            Finding(
                rule="collectives-vs-sweep",
                severity="warning",
                confidence="medium",
                title=f"{name}: {c.op} of {sizes_arg([c.size_bytes])} takes {per_call:.2f} us per call, "
                + (
                    f"{ratio:.1f}x the sweep's {hit[0]:.2f} us"
                    if hit[1] == c.size_bytes
                    else f"at least {ratio:.1f}x the {most:.2f} us the sweep's {sizes_arg([hit[1]])} "
                    "bounds it to"
                ),
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
                cost=Cost.measured(
                    max(0.0, per_call - most) / 1000.0,
                    "call",
                    f"each {c.op} call's kernel time above the sweep's at its size (profiled "
                    "kernel time against the sweep's)",
                    high=max(0.0, per_call - least) / 1000.0,
                    run=name,
                    covers=(COLLECTIVE, "excess"),
                    total_ms=max(0.0, per_call - least) * c.count / 1000.0,
                ),
            )
        )
    if missing:
        out.append(
            NotChecked(
                rule="collectives-vs-sweep",
                hypothesis=f"{name}: {hypothesis}",
                missing=f"the sweep has no default-settings result within 2x of {sizes_arg(missing)}",
                next_command=sweep_command(nranks, sizes_arg(missing)),
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


def _best_at(sweep: list[ResultRecord], nranks: int | None, op: str, size: int) -> dict | None:
    rows = [
        r
        for r in sweep
        if r.collective == op
        and r.size_bytes == size
        and (nranks is None or r.nranks in (None, nranks))
    ]
    if not rows:
        return None
    best = min(rows, key=lambda r: r.timed_us)
    return {"config": best.config_id, "time_us": best.time_us, "mode": best.mode}
