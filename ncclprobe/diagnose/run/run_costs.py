"""The speculative runs the step rules weigh, and what a per-cycle cost of one is per generated
token and as a share of the run's time.

`rules` (eager phases, the verify ratio) and `rules_speed` (speculative against its baseline) read
the same runs and price their causes in the same units, so that severities follow what a cause could
win and the costs of one run add up; this is the one place those conversions are written.
"""

from __future__ import annotations

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import SPECULATIVE_KINDS, EngineRun


def spec_runs(ev: E.Evidence) -> list[tuple[str, EngineRun]]:
    """The speculative runs under diagnosis that have steps (a server log has none: rules_log)."""
    return [
        (src, run)
        for src, run in ev.all_runs()
        if run.mode == "speculative" and src == "trace" and run.phases
    ]


def cost_per_token(run: EngineRun, cost_cycle: float) -> float | None:
    """A per-cycle cost spread over the tokens a cycle yields (per sequence): from the run's own
    token count where it has one (our trace), else from the acceptance length (profile + log)."""
    if run.new_tokens and run.cycles:
        return run.per_token_ms(cost_cycle * run.cycles)
    tpc = run.tokens_per_cycle()
    return cost_cycle / tpc if tpc else None


def share_of_run(run: EngineRun, cost_token: float | None, cost_cycle: float) -> float | None:
    """What share of the run's time a cost is: per token when both are known, else per cycle."""
    if cost_token is not None and run.ms_per_token:
        return cost_token / run.ms_per_token
    cycle = sum(
        (p.median_ms or 0.0) * (p.count / run.cycles if run.cycles else 1.0)
        for p in run.phases.values()
        if p.kind in SPECULATIVE_KINDS and p.count
    )
    return cost_cycle / cycle if cycle else None


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
