"""How much of the step the collectives take, and whether they cost more in the engine than the
sweep measured for the same sizes: the ceiling on what any lever on them can win, and the check that
the engine's collectives run as fast as they can.

Apart from `rules` because these rules read the runs' collectives (share, counts, sizes) and the
sweep's results, not the steps' graphs or the model's expected costs.
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import profile_command, sweep_next
from ncclprobe.diagnose.run.ledger import COLLECTIVE
from ncclprobe.diagnose.run.levers import lever_words, libraries
from ncclprobe.diagnose.run.profile_costs import run_ms
from ncclprobe.diagnose.run.rules_ranks import with_wait_split
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import Cost, Finding, NotChecked, RuledOut

COLLECTIVE_BOUND_SHARE = 0.5  # at least half the step in collectives: where the time goes
COLLECTIVE_MINOR_SHARE = 0.15  # below this, no lever on the collectives can win much
SWEEP_EXCESS = 2.0  # engine collectives this many times the sweep's time: suspicious


def collective_share(ev: E.Evidence) -> list:
    """How much of the step the collectives take: the ceiling on what any lever on them can win.
    One verdict for the whole input, with every run's share as evidence."""
    shares = {
        run.name(src): (run.collective_share, run)
        for src, run in ev.all_runs()
        if run.collective_share is not None
    }
    if not shares:
        return [
            NotChecked(
                rule="collective-share",
                hypothesis="collectives dominate the step",
                missing="the evidence has no measured collective share",
            )
        ]
    bound = {name: pair for name, pair in shares.items() if pair[0] >= COLLECTIVE_BOUND_SHARE}
    if bound:
        return [_bound_finding(ev, bound)]
    if all(share < COLLECTIVE_MINOR_SHARE for share, _ in shares.values()):
        worst = max(shares, key=lambda name: shares[name][0])
        share, run = shares[worst]
        total = run.ms_per_token or _steps_ms(run)
        of = (
            f"its {total:.3f} ms per token"
            if run.ms_per_token
            else f"the {total:.3f} ms its profiled steps took"
        )
        return [
            RuledOut(
                rule="collective-share",
                hypothesis="the collectives as the main lever",
                reason=f"collectives take at most {share:.0%} of the step time ({worst}): no lever on "
                f"them can win more than {share * total:.3f} ms of {of}",
            )
        ]
    return []


def _step_ms(run: EngineRun) -> float:
    """The median time of the step kind that takes most of a profile's time (prefill aside)."""
    steps = [p for p in run.phases.values() if p.count and p.median_ms and p.kind != "prefill"]
    if not steps:
        return 0.0
    return max(steps, key=lambda p: (p.median_ms or 0.0) * p.count).median_ms or 0.0


def _steps_ms(run: EngineRun) -> float:
    """All the time of a profile's steps but the prefill (a profile counts steps, not tokens)."""
    return sum(
        p.median_ms * p.count
        for p in run.phases.values()
        if p.count and p.median_ms and p.kind != "prefill"
    )


def _bound_finding(ev: E.Evidence, bound: dict) -> Finding:
    worst = max(bound, key=lambda name: bound[name][0])
    share, run = bound[worst]
    sizes = _all_sizes(ev)
    per_step = run.ms_per_token or _step_ms(run)
    count = (
        f"{run.per_token_count:.1f} collectives and {run.per_token_bytes:.0f} bytes per token "
        if run.per_token_count is not None
        else ""
    )
    unit = "token" if run.ms_per_token else "step"
    finding = Finding(
        rule="collective-bound",
        # where the time goes, not what is wrong: what a lever could win there is a bound, and a
        # bound on a healthy run is no warning (a comparison with a sweep or a baseline is)
        severity="info",
        confidence="high",
        title=f"collectives take {share:.0%} of the step time ({worst}"
        + (f", and {len(bound) - 1} more run(s) at 50% or more)" if len(bound) > 1 else ")"),
        detail=(
            f"{count}The collectives take {share:.0%} of the step: where the time goes, not what "
            "is wrong with it; what a lever could win there is at most that share. Fewer or larger "
            f"collectives act on any of them; by what moved the data: {lever_words(libraries(ev))}. "
            "Whether the collectives run slower than they should is a comparison: a sweep of the "
            "same sizes (--sweep) or a baseline run (--baseline, --baseline-profile)."
        ),
        evidence={
            "collective_share_by_run": {name: round(pair[0], 3) for name, pair in bound.items()},
            "per_token_count": run.per_token_count,
            "per_token_bytes": run.per_token_bytes,
            "ms_per_token": run.ms_per_token,
            "sizes_bytes": sizes,
        },
        cost=collective_cost(worst, run, share, per_step, unit, (COLLECTIVE,)),
        next_command=sweep_next(ev, sizes),
    )
    # profiles of several ranks: the share is part waiting for a rank, part moving data
    return with_wait_split(finding, run, share, per_step, COLLECTIVE_BOUND_SHARE, unit)


def collective_cost(
    name: str, run: EngineRun, share: float, per_unit: float, unit: str, covers: tuple
) -> Cost:
    """At most what a lever on the collectives could win: their share of the run's time (a bound,
    `share` of `per_unit` ms per `unit`) in the ledger of the run called `name`."""
    whole = run.ms_per_token * run.new_tokens if run.ms_per_token and run.new_tokens else None
    if whole is None and run.source == "profile":
        whole = run_ms(run)
    return Cost.bound(
        share * per_unit,
        unit,
        f"the collectives' share of the run's time ({share:.0%}): what fewer, larger or faster "
        "collectives could win at most",
        run=name,
        covers=covers,
        total_ms=share * whole if whole else None,
    )


def collectives_vs_sweep(ev: E.Evidence) -> list:
    """The engine's collectives against the sweep's time for the same sizes, settings and mode."""
    hyp = "engine collectives cost more than the sweep measured"
    if not any(run.collectives for _, run in ev.all_runs()):
        # none seen rules out only where collectives would have been seen: our trace records every
        # call, a profile with GPU activity every kernel; a server log or a CPU-only profile none
        seen = _records_collectives(ev)
        if not seen:
            return [
                NotChecked(
                    rule="collectives-vs-sweep",
                    hypothesis=hyp,
                    missing="collectives: "
                    + (
                        "a server log records none"
                        if ev.kind == "server-log"
                        else "the evidence cannot show them (a profile without GPU activity)"
                    ),
                    next_command=profile_command(ev.config.get("engine"))
                    if ev.kind != "engine-trace"
                    else "",
                )
            ]
        return [RuledOut(rule="collectives-vs-sweep", hypothesis=hyp, reason=seen)]
    sizes = _all_sizes(ev)
    if not ev.sweep:
        return [
            NotChecked(
                rule="collectives-vs-sweep",
                hypothesis=hyp,
                missing="no --sweep results",
                next_command=sweep_next(ev, sizes),
            )
        ]
    from ncclprobe.diagnose.run.sweep_match import compare_calls, compare_run

    out = []
    for source, run in ev.all_runs():
        if run.source == "engine-trace":
            out.append(compare_run(ev, run, run.name(source), hyp, SWEEP_EXCESS))
        else:
            out += compare_calls(ev, run, run.name(source), hyp, SWEEP_EXCESS)
    return out


def _records_collectives(ev: E.Evidence) -> str:
    """What the evidence would have shown had a collective run ('' when it cannot show one): our
    trace counts every call the communicator issued; a profile with GPU activity holds every
    kernel (a profile's tp may be only the number of files given: say what was seen)."""
    if ev.kind == "engine-trace":
        return f"the engine issued no collectives (tp={ev.config.get('tp')})"
    gpu = any(
        p.device_ms is not None
        for _, run in ev.all_runs()
        if run.source == "profile"
        for p in run.phases.values()
    )
    return "no collective kernel ran in the profiled steps (GPU activity recorded)" if gpu else ""


def _all_sizes(ev: E.Evidence) -> list[int]:
    return sorted({size for _, run in ev.all_runs() for size in run.collective_sizes()})


RULES = (collective_share, collectives_vs_sweep)
