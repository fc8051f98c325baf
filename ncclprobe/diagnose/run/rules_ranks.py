"""Hypotheses about several ranks' profiles: the rank the others wait for at the collectives, and
how much of the collectives' time is waiting rather than moving data (the lever NCCL settings do
not have). They read the calls matched across ranks (`evidence.run.profile.align`); with nothing to
match (a CPU-only profile) only the ranks' step times, which cannot tell working from waiting.
"""

from __future__ import annotations

import dataclasses

from ncclprobe.diagnose.run.ledger import COLLECTIVE, TRANSFER, WAIT
from ncclprobe.diagnose.run.levers import moving_part_words
from ncclprobe.diagnose.run.profile_costs import run_ms
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.profile import rank_skew as _rank_skew
from ncclprobe.evidence.run.profile.align import LATE_FACTOR, LATE_FLOOR_US, Alignment, Lateness
from ncclprobe.findings import Cost, Finding, NotChecked, RuledOut, severity_for_share

SKEW_WARN = 0.10  # without matched collectives: ranks' median steps more than 10% apart
STRAGGLER_RATIO = 2.0  # a rank whose excess wait is at least twice any other rank's ...
STRAGGLER_MIN_SHARE = 0.02  # ... and at least 2% of the aligned window holds the others up
ALWAYS_LAST_CHANCE = (
    0.001  # last this often by chance (every rank equally likely): at most 1 in 1000
)
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
            out.append(_straggler_outcome(run.alignment, run))
            continue
        out.extend(_step_time_skew(ev, run))
    return out


def straggler(al: Alignment) -> tuple[Lateness | None, float]:
    """(the rank's Lateness, its share of the aligned window) when one rank holds the others up:
    its excess wait is at least STRAGGLER_RATIO × any other rank's and STRAGGLER_MIN_SHARE of the
    window; or, where no call stands out (a rank late before every call makes every call's spread
    its delay), it arrives last more often than chance allows (`always_last`, ALWAYS_LAST_CHANCE)
    at `always_last_cut` of the calls or more, by a median margin over the next-latest rank above
    launch jitter (LATE_FLOOR_US) and STRAGGLER_MIN_SHARE of the window;
    (None, the largest share) otherwise."""
    lates = al.lateness()
    top = lates[0]
    others = max((row.excess_us for row in lates[1:]), default=0.0)
    share = top.excess_us / al.window_us if al.window_us else 0.0
    named = top.calls and top.excess_us >= STRAGGLER_RATIO * others and share >= STRAGGLER_MIN_SHARE
    if named:  # late calls stand out against the typical one: their excess is the surer figure
        return top, share
    last = al.always_last()
    if last is not None:
        row, chance = last
        last_share = row.excess_us / al.window_us if al.window_us else 0.0
        ranks = len(al.ranks)
        if (
            chance <= ALWAYS_LAST_CHANCE
            and row.calls >= always_last_cut(ranks) * len(al.calls)
            and last_share >= STRAGGLER_MIN_SHARE
            and (row.median_spread_us or 0.0) > LATE_FLOOR_US
        ):
            return row, last_share
    return None, share


def always_last_cut(ranks: int) -> float:
    """The share of the calls a rank must arrive last at to be late before every call: halfway
    between chance (1 in `ranks`) and every call, so that a slight bias over many calls (ranks
    taking turns on one GPU in a fixed order) is not read as a rank late before each."""
    return (1.0 + 1.0 / ranks) / 2.0


def _straggler_outcome(al, run=None):
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
    if al.on_host:
        where = "its host had not reached the collective (a CPU-only profile: its own work then is not split here)"
    if late.launch_late_us is not None:
        where += (
            f"; its host issued the collective a median {late.launch_late_us / 1000.0:.3f} ms after the "
            "first rank's kernel had started"
        )
    cause = (
        "its host was late (the GPU waited for the launch): look at the host work before the collective "
        "on that rank (data loading, Python, logging, a synchronisation, a busier CPU)"
        if gap >= HOST_GAP_SHARE
        else "it reached the collective late: look at what that rank does before the call (data "
        "loading, Python, logging, a sleep or a busier CPU)"
        if al.on_host
        else "its own GPU work before the collective took longer (more work, a slower or shared GPU, "
        "throttling): look at what that rank computes before the call"
    )
    always = late.chance is not None
    late_words = (
        f"the others wait {per_call:.3f} ms for it after the next-latest rank each time"
        if always
        else f"the others wait {per_call:.3f} ms longer than at a typical call each time"
    )
    how = (
        f"It arrived last at {late.calls} of {len(al.calls)} calls, where each of the "
        f"{len(al.ranks)} ranks would arrive last at 1 in {len(al.ranks)} by chance (the chance of "
        f"{late.calls} or more: {late.chance:.1e}): late before every call, so every call's "
        f"arrivals are spread by it (a typical call's by {typical:.3f} ms) and no call stands out; "
        f"it came a median {late.median_spread_us / 1000.0:.3f} ms after the next-latest rank "
        f"(largest {late.largest_us / 1000.0:.3f} ms)"
        if always
        else f"A typical call's arrivals are {typical:.3f} ms apart; at {late.calls} calls rank {rank} "
        f"arrived last by a median {late.median_spread_us / 1000.0:.3f} ms (largest "
        f"{late.largest_us / 1000.0:.3f} ms)"
    )
    also = al.always_last() if not always else None
    if also and also[0].rank == rank and also[1] <= ALWAYS_LAST_CHANCE:
        row = also[0]
        if row.calls >= always_last_cut(len(al.ranks)) * len(al.calls):
            how += (
                f". It also arrives last at {row.calls} of {len(al.calls)} calls (the chance of "
                f"that were every rank equally likely: {row.chance:.1e}), a median "
                f"{row.median_spread_us / 1000.0:.3f} ms after the next-latest rank: whether "
                "that is lateness or the ranks' usual order (ranks taking turns on one GPU keep "
                "one) this evidence cannot tell, so only the calls that stand out are counted in "
                "its cost"
            )
    return Finding(
        rule="rank-skew",
        severity=severity_for_share(share),
        confidence=al.clock_confidence,
        title=(
            f"rank {rank} arrives late at {late.calls} of {len(al.calls)} collective calls: "
            f"{late_words}, {share:.0%} of the {window:.1f} ms profiled"
        ),
        detail=(
            f"Calls matched across ranks by {al.method}. {how}. Between the first rank's arrival and "
            f"its own, {where}: "
            f"{cause}. The waiting ranks' collective kernels run through that wait ({waited:.3f} ms each in the "
            f"window, {_share_text(waiting)}): it is not the transfer's time, and no setting of the "
            "collectives shortens it."
        ),
        evidence={
            "straggler_rank": rank,
            "late_calls": late.calls,
            "calls_matched": len(al.calls),
            "typical_spread_ms": round(typical, 4),
            "found_by": "arrives last more often than chance" if always else "late calls",
            "chance_of_arriving_last_this_often": late.chance,
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
        cost=_wait_cost(run, share),
    )


def _wait_cost(run, share: float) -> Cost | None:
    """What the late rank costs the others: its excess wait's share of the aligned window, per
    step of the run (its steps at their median), profiled (the profiler's host cost may be in the
    late rank's delay)."""
    if run is None:
        return None
    steps = sum(p.count for p in run.phases.values() if p.count and p.kind != "prefill")
    whole = run_ms(run)
    if not steps or not whole:
        return None
    return Cost.profiled(
        share * whole / steps,
        "step",
        "the other ranks' wait for the late rank beyond a typical call's, as a share of the "
        "aligned window (profiled)",
        run=run.name("trace"),
        covers=(COLLECTIVE, WAIT),
        total_ms=share * whole,
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
    libs = {c.library for c in run.collectives if c.library}
    waiting, moving = share * split["wait"], share * split["transfer"]
    who = (
        f"rank {split['straggler']} (it arrives last: see rank-skew)"
        if split["straggler"] is not None
        else "the other ranks (no rank arrives last consistently)"
    )
    return dataclasses.replace(
        finding,
        severity="info",  # a bound: what NCCL settings could win on the moving part at most
        title=f"collectives take {share:.0%} of the step time: {waiting:.0%} waiting for {who}, "
        f"{moving:.0%} moving data",
        detail=(
            f"On rank {split['rank']}, the rank with the largest collective share, {split['wait']:.0%} of the "
            f"collective kernel time is waiting for {who} to arrive and {split['transfer']:.0%} is moving data "
            "once every rank is in (calls matched across ranks; the step's share split in that proportion). "
            "Work on the waiting first: no setting of the collectives shortens it. "
            + moving_part_words(libs, moving * per_step, per_step, unit)
        ),
        evidence={
            **finding.evidence,
            "rank": split["rank"],
            "wait_share_of_collective_time": round(split["wait"], 3),
            "transfer_share_of_collective_time": round(split["transfer"], 3),
            "straggler_rank": split["straggler"],
        },
        cost=dataclasses.replace(
            finding.cost,
            high=moving * per_step,
            total_ms=None
            if finding.cost.total_ms is None
            else finding.cost.total_ms * moving / share,
            covers=(COLLECTIVE, TRANSFER),
            basis="the collectives' time moving data once every rank is in: what NCCL settings, "
            "fewer or larger collectives could win at most",
        )
        if finding.cost
        else None,
    )


def _step_time_skew(ev, run) -> list:
    """No collectives to match (a CPU-only profile, no collective on two ranks): the spread of the
    ranks' median step times, which cannot tell the rank that works from the one that waits."""
    skew = _rank_skew(run)
    if not skew:
        return []
    name, worst = max(skew.items(), key=lambda kv: kv[1])
    hyp = "one rank lags the others"
    if worst < SKEW_WARN:
        # ranks that synchronise every step take the same time per step however late one of them
        # is: alike step times rule nothing out; only who arrives last at the collectives would
        return [
            NotChecked(
                rule="rank-skew",
                hypothesis=hyp,
                missing=(
                    f"the order in which the ranks reach their collectives: their median steps are "
                    f"within {worst:.0%} of each other ({len(run.ranks)} ranks), as in any job that "
                    "synchronises every step whether or not a rank is late, and no collective could "
                    "be matched across the ranks to see who arrives last (record the collectives: "
                    "CUDA activity for NCCL kernels, or a backend whose ops torch annotates, as gloo's; "
                    "or the Flight Recorder's issue times: ncclprobe capture, diagnose --flight-recorder)"
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
