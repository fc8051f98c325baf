"""Hypotheses about several ranks' profiles: the rank the others wait for at the collectives, and
how much of the collectives' time is waiting rather than moving data (the lever NCCL settings do
not have). They read the calls matched across ranks (`evidence.run.profile.align`); with nothing to
match (a CPU-only profile) only the ranks' step times, which cannot tell working from waiting.
"""

from __future__ import annotations

import dataclasses

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.profile import rank_skew as _rank_skew
from ncclprobe.evidence.run.profile.align import LATE_FACTOR
from ncclprobe.findings import Finding, NotChecked, RuledOut, severity_for_share

SKEW_WARN = 0.10  # without matched collectives: ranks' median steps more than 10% apart
STRAGGLER_RATIO = 2.0  # a rank whose excess wait is at least twice any other rank's ...
STRAGGLER_MIN_SHARE = 0.02  # ... and at least 2% of the aligned window holds the others up
HOST_GAP_SHARE = (
    0.5  # the straggler's GPU idle at least half the time before its late calls: its host
)


def _profiles(ev: E.Evidence):
    return [(src, run) for src, run in ev.all_runs() if run.source == "profile"]


def ranks_skew(ev: E.Evidence) -> list:
    """With several ranks' profiles: the rank the others wait for at the collectives (from the
    calls matched across ranks, `evidence.run.profile.align`), named with where its time went;
    without collectives to match, the spread of the ranks' step times."""
    out = []
    for src, run in _profiles(ev):
        if src != "trace" or len(run.ranks) < 2:
            continue
        if run.alignment is not None:
            out.append(_straggler_outcome(run.alignment))
            continue
        out.extend(_step_time_skew(ev, run))
    return out


def straggler(al) -> tuple[object | None, float]:
    """(the rank's Lateness, its share of the aligned window) when one rank holds the others up:
    its excess wait is at least STRAGGLER_RATIO × any other rank's and STRAGGLER_MIN_SHARE of the
    window; (None, the largest share) otherwise."""
    lates = al.lateness()
    top = lates[0]
    others = max((row.excess_us for row in lates[1:]), default=0.0)
    share = top.excess_us / al.window_us if al.window_us else 0.0
    named = top.calls and top.excess_us >= STRAGGLER_RATIO * others and share >= STRAGGLER_MIN_SHARE
    return (top if named else None), share


def _straggler_outcome(al):
    late, share = straggler(al)
    typical = (al.typical_spread_us or 0.0) / 1000.0
    window = al.window_us / 1000.0
    totals = al.totals()
    hyp = "one rank holds the others up at the collectives"
    if late is None:
        last = ", ".join(f"rank {t.rank} at {t.last}" for t in totals)
        return RuledOut(
            rule="rank-skew",
            hypothesis=hyp,
            reason=(
                f"no rank arrives last consistently: of {len(al.calls)} calls matched ({al.method}), "
                f"the last to arrive was {last}; a typical call's arrivals are {typical:.3f} ms apart and "
                f"the late calls (over {LATE_FACTOR:g}x that) cost {share:.1%} of the {window:.1f} ms "
                "aligned"
            ),
        )
    rank = late.rank
    waiting = [t for t in totals if t.rank != rank]
    waited = sum(t.wait_us for t in waiting) / 1000.0 / len(waiting)
    per_call = (late.excess_us / late.calls) / 1000.0
    gap = late.idle_us / (late.idle_us + late.own_kernels_us or 1.0)
    where = (
        f"its GPU was idle {late.idle_us / 1000.0:.3f} ms of those windows and ran its own kernels "
        f"{late.own_kernels_us / 1000.0:.3f} ms"
    )
    if late.launch_late_us is not None:
        where += (
            f"; its host issued the collective a median {late.launch_late_us / 1000.0:.3f} ms after the "
            "first rank's kernel had started"
        )
    cause = (
        "its host was late (the GPU waited for the launch): look at the host work before the collective "
        "on that rank (data loading, Python, logging, a synchronisation, a busier CPU)"
        if gap >= HOST_GAP_SHARE
        else "its own GPU work before the collective took longer (more work, a slower or shared GPU, "
        "throttling): look at what that rank computes before the call"
    )
    return Finding(
        rule="rank-skew",
        severity=severity_for_share(share),
        confidence=al.clock_confidence,
        title=(
            f"rank {rank} arrives late at {late.calls} of {len(al.calls)} collective calls: the others wait "
            f"{per_call:.3f} ms longer than at a typical call each time, {share:.0%} of the {window:.1f} ms "
            "profiled"
        ),
        detail=(
            f"Calls matched across ranks by {al.method}. A typical call's arrivals are {typical:.3f} ms apart; "
            f"at {late.calls} calls rank {rank} arrived last by a median {late.median_spread_us / 1000.0:.3f} ms "
            f"(largest {late.largest_us / 1000.0:.3f} ms). Between the first rank's arrival and its own, {where}: "
            f"{cause}. The waiting ranks' collective kernels run through that wait ({waited:.3f} ms each in the "
            f"window, {_share_text(waiting)}): it is not NCCL's time, and no NCCL setting shortens it."
        ),
        evidence={
            "straggler_rank": rank,
            "late_calls": late.calls,
            "calls_matched": len(al.calls),
            "typical_spread_ms": round(typical, 4),
            "median_late_ms": round(late.median_spread_us / 1000.0, 4),
            "excess_wait_ms": round(late.excess_us / 1000.0, 3),
            "excess_wait_ms_per_late_call": round(per_call, 4),
            "window_ms": round(window, 3),
            "share_of_window": round(share, 4),
            "gpu_idle_before_ms": round(late.idle_us / 1000.0, 3),
            "own_kernels_before_ms": round(late.own_kernels_us / 1000.0, 3),
            "launch_after_first_arrival_ms": None
            if late.launch_late_us is None
            else round(late.launch_late_us / 1000.0, 4),
            "wait_ms_by_rank": {t.rank: round(t.wait_us / 1000.0, 3) for t in totals},
            "transfer_ms_by_rank": {t.rank: round(t.transfer_us / 1000.0, 3) for t in totals},
        },
    )


def _share_text(totals) -> str:
    shares = [t.wait_share for t in totals if t.wait_share is not None]
    return (
        f"{max(shares):.0%} of their collective kernel time at most" if shares else "share unknown"
    )


def with_wait_split(
    finding: Finding, run, share: float, per_step: float, bound: float, unit: str = "step"
) -> Finding:
    """collective-bound on aligned ranks: the collectives' share split into waiting for a rank and
    moving data, NCCL settings offered for the moving part only (a warning only when that part
    alone is at least `bound` of the step), its cost that part. `per_step` is ms per `unit`: a
    token where the run's tokens are known (the late steps' waits included), else a step."""
    split = collective_split(run)
    if split is None:
        return finding
    waiting, moving = share * split["wait"], share * split["transfer"]
    who = (
        f"rank {split['straggler']} (it arrives last: see rank-skew)"
        if split["straggler"] is not None
        else "the other ranks (no rank arrives last consistently)"
    )
    return dataclasses.replace(
        finding,
        severity="warning" if moving >= bound else "info",
        title=f"collectives take {share:.0%} of the step time: {waiting:.0%} waiting for {who}, "
        f"{moving:.0%} moving data",
        detail=(
            f"On rank {split['rank']}, the rank with the largest collective share, {split['wait']:.0%} of the "
            f"collective kernel time is waiting for {who} to arrive and {split['transfer']:.0%} is moving data "
            "once every rank is in (calls matched across ranks; the step's share split in that proportion). "
            "Work on the waiting first: no NCCL setting shortens it. NCCL settings, and fewer or larger "
            f"collectives, act on the moving part only: at most {moving * per_step:.3f} ms of the "
            f"{per_step:.3f} ms per {unit}; a sweep of the engine's sizes measures what they can win there."
        ),
        evidence={
            **finding.evidence,
            "rank": split["rank"],
            "wait_share_of_collective_time": round(split["wait"], 3),
            "transfer_share_of_collective_time": round(split["transfer"], 3),
            "straggler_rank": split["straggler"],
        },
        cost_ms_per_token=moving * (run.ms_per_token or 0.0) or None,
        cost_ms_per_step=moving * per_step,
    )


def _step_time_skew(ev, run) -> list:
    """No collectives to match (a CPU-only profile, no collective on two ranks): the spread of the
    ranks' median step times, which cannot tell the rank that works from the one that waits."""
    skew = _rank_skew(run)
    if not skew:
        return []
    name, worst = max(skew.items(), key=lambda kv: kv[1])
    hyp = "one rank lags the others"
    if worst < SKEW_WARN and run.collectives:
        # the ranks' collectives hold every rank to the slowest one's pace: equal step times are
        # what a late rank looks like too, so they rule nothing out
        return [
            NotChecked(
                rule="rank-skew",
                hypothesis=hyp,
                missing=(
                    "which rank comes last to the collectives: their calls could not be matched "
                    f"across the {len(run.ranks)} ranks' profiles (no collective kernel), and the "
                    "ranks' equal step times are what each collective's wait for the last rank "
                    "makes of them; the Flight Recorder's issue times show it (ncclprobe capture, "
                    "or diagnose --flight-recorder)"
                ),
            )
        ]
    if worst < SKEW_WARN:
        return [
            RuledOut(
                rule="rank-skew",
                hypothesis=hyp,
                reason=(
                    f"the fastest rank's median step is within {worst:.0%} of the slowest's "
                    f"({len(run.ranks)} ranks)"
                ),
            )
        ]
    values = {r["rank"]: r["phases"].get(name) for r in run.ranks}
    slow = max(values, key=lambda r: values[r] or 0)
    fast = min(values, key=lambda r: values[r] if values[r] else float("inf"))
    longer = (values[slow] - values[fast]) / values[fast]
    return [
        Finding(
            rule="rank-skew",
            severity="info" if ev.config.get("device") == "cpu" else "warning",
            confidence="low",
            title=(
                f"rank {slow}'s {name} steps take {longer:.0%} longer than rank {fast}'s "
                f"({values[slow]:.3f} against {values[fast]:.3f} ms)"
            ),
            detail=(
                "No collective could be matched across the ranks, so waiting cannot be told from work: the "
                f"rank with the longer steps can be the one that waits for the others. Rank {slow}'s steps "
                "set the job's pace; look at what else runs on its GPU, its host and its links."
            ),
            evidence={"phase": name, "median_ms_by_rank": values, "skew": round(worst, 3)},
        )
    ]


def collective_split(run) -> dict | None:
    """For the rank whose collective share is the largest: the shares of its collective kernel time
    spent waiting for the other ranks and moving data, and the straggler if one is named; None
    without aligned ranks."""
    al = run.alignment
    if al is None:
        return None
    totals = al.totals()
    shares = [r.get("collective_share") or 0.0 for r in run.ranks]
    pos = max(range(len(totals)), key=lambda i: shares[i] if i < len(shares) else 0.0)
    wait = totals[pos].wait_share
    if wait is None:
        return None
    late, _ = straggler(al)
    return {
        "rank": totals[pos].rank,
        "wait": wait,
        "transfer": 1.0 - wait,
        "straggler": late.rank if late else None,
    }
