"""Hypotheses only a profile can settle, one pure function each, as in `rules`: the steps' own
(`rules_profile_eager`: eager launches against graph replays; `rules_profile_steps`: waiting for
the host, glue between replays; `rules_profile_baseline`: how they add up against a baseline),
whether NCCL can explain a gap (from the collective kernels actually seen); ranks that hold the
others up are `rules_ranks`'.

They read the same view as every rule (`ncclprobe.evidence.run.view`); on an engine trace they
stay silent (its phases carry no GPU idle time; `rules` covers it).
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import profile_command
from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.diagnose.run import (
    rules_collective_baseline,
    rules_profile_baseline,
    rules_profile_eager,
    rules_profile_steps,
)
from ncclprobe.diagnose.run.levers import lever_words, libraries
from ncclprobe.diagnose.run.rules_ranks import collective_split, ranks_skew
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.profile.comm_names import NCCL_LIBRARIES
from ncclprobe.evidence.run.view import Collective, EngineRun, Phase
from ncclprobe.findings import Finding, NotChecked, RuledOut
from ncclprobe.sizes import format_size

MEASURED_KINDS = ("decode", "verify", "draft", "other")
NCCL_GAP_SHARE = 0.5  # collectives that grew by half the gap between two step kinds can explain it


def _profiles(ev: E.Evidence) -> list[tuple[str, EngineRun]]:
    return [(src, run) for src, run in ev.all_runs() if run.source == "profile"]


def nccl_from_kernels(ev: E.Evidence) -> list:
    """Whether NCCL can explain the gap between a slow phase and the graphed phase it is compared
    with, from the collective kernels actually in the profiles: the collectives' time per step
    against the gap, and the algorithm/protocol NCCL launched on each side."""
    runs = _profiles(ev)
    if not runs:
        return []
    hyp = "NCCL settings explain the slow steps"
    if not any(run.phases for _, run in runs):
        return []
    libs = libraries(ev)
    others = libs - NCCL_LIBRARIES
    if not any(p.device_ms is not None for _, run in runs for p in run.phases.values()):
        if others and not libs & NCCL_LIBRARIES:  # the host ops name what ran: gloo, ...
            return [
                RuledOut(
                    rule="nccl-settings",
                    hypothesis=hyp,
                    reason=f"the collectives ran on {', '.join(sorted(others))} (the profile's host "
                    f"ops), not NCCL: no NCCL setting acts on them ({lever_words(others)})",
                )
            ]
        return [
            NotChecked(
                rule="nccl-settings",
                hypothesis=hyp,
                missing="GPU kernels (a CPU-only profile shows no NCCL kernels)",
                next_command=profile_command(ev.config.get("engine")),
            )
        ]
    colls = [c for _, run in runs for c in run.collectives if c.library in NCCL_LIBRARIES]
    pair = _slowest_pair(ev)
    if not colls:
        ran = f": the communication ran on {', '.join(sorted(others))} ({lever_words(others)})"
        return [
            RuledOut(
                rule="nccl-settings",
                hypothesis=hyp,
                reason="no NCCL/RCCL kernel ran in the profiled steps: no NCCL setting acts on them"
                + (ran if others else ""),
            )
        ]
    if pair is None:
        return []
    (run_s, ph_s), (run_f, ph_f) = pair
    coll_s, coll_f = _coll_ms_per_step(run_s, ph_s), _coll_ms_per_step(run_f, ph_f)
    gap = (ph_s.median_ms or 0) - (ph_f.median_ms or 0)
    kernels_s, kernels_f = _launched(run_s, ph_s), _launched(run_f, ph_f)
    if gap < max(0.05, 0.05 * (ph_f.median_ms or 0)):
        return []  # the two take the same time: there is no gap for NCCL to explain
    grew = coll_s - coll_f
    if grew < NCCL_GAP_SHARE * gap:
        same = kernels_s == kernels_f and kernels_s
        return [
            RuledOut(
                rule="nccl-settings",
                hypothesis=hyp,
                reason=(
                    f"collective kernels run {coll_s:.3f} ms per {ph_s.name} step against {coll_f:.3f} ms per "
                    f"{ph_f.name} step ({_wall_words(run_s, ph_s)}), while the steps differ by {gap:.3f} ms"
                    + (
                        f"; NCCL launched the same kernels on both sides ({', '.join(sorted(kernels_s))})"
                        if same
                        else ""
                    )
                    + ": not the cause"
                ),
            )
        ]
    return [
        Finding(
            rule="nccl-settings",
            severity="warning",
            confidence="medium",
            title=f"collective kernels run {grew:.3f} ms longer per step in {ph_s.name} than in {ph_f.name}: "
            f"{grew / gap:.0%} of the {gap:.3f} ms gap",
            detail=(
                f"Collective kernels run {coll_s:.3f} ms per {ph_s.name} step and {coll_f:.3f} ms per "
                f"{ph_f.name} step ({_wall_words(run_s, ph_s)}). NCCL launched "
                f"{', '.join(sorted(kernels_s)) or 'no kernels'} on the slow side and "
                f"{', '.join(sorted(kernels_f)) or 'no kernels'} on the fast side (kernel names: the kernel "
                "launched, not proof of the algorithm/protocol it ran; NCCL_DEBUG_SUBSYS=TUNING logs those). "
                "A kernel's time overlaps the step's other work, so this bounds what NCCL settings can win "
                "rather than measuring it. Compare with a sweep at the same sizes."
            ),
            evidence={
                "collective_ms_per_step": {
                    ph_s.name: round(coll_s, 4),
                    ph_f.name: round(coll_f, 4),
                },
                "gap_ms": round(gap, 4),
                "measured_as": _wall_words(run_s, ph_s),
            },
        )
    ]


def _slowest_pair(
    ev: E.Evidence,
) -> tuple[tuple[EngineRun, Phase], tuple[EngineRun, Phase]] | None:
    """(slow, fast): the eager step kind and the graphed one it is compared with, as (run, phase);
    None when no eager step was measured or nothing graphed to compare it with."""
    candidates = [
        (run, p)
        for src, run in _profiles(ev)
        if src == "trace"
        for p in run.phases.values()
        if p.count and p.kind in MEASURED_KINDS and p.graphed is False
    ]
    if not candidates:
        return None
    run_s, ph_s = max(candidates, key=lambda rp: rp[1].median_ms or 0)
    reference = C.baseline_reference(ev, ph_s.kind)
    if reference is not None:
        return (run_s, ph_s), reference
    others = [p for p in run_s.phases.values() if p.graphed and p.count]
    if others:
        return (run_s, ph_s), (run_s, max(others, key=lambda p: p.count))
    return None


def _coll_ms_per_step(run: EngineRun, phase: Phase) -> float:
    """Per step, the wall time with a collective kernel running (the union of its collective
    kernels: summed kernel time counts overlapping calls twice), less the share spent waiting for
    another rank where the ranks are aligned: what NCCL's transfer could account for."""
    only_nccl = all(c.library in NCCL_LIBRARIES for c in run.collectives)
    if phase.collective_ms is not None and only_nccl:
        wall = phase.collective_ms
    else:  # NCCL's kernels alone, where other communication ran beside them
        calls = [
            c
            for c in run.collectives
            if c.phase == phase.name and c.time_us and c.library in NCCL_LIBRARIES
        ]
        wall = sum(c.time_us or 0.0 for c in calls) / 1000.0 / phase.count if phase.count else 0.0
    split = collective_split(run)
    return wall * split["transfer"] if split else wall


def _wall_words(run: EngineRun, phase: Phase) -> str:
    what = (
        "wall time with a collective kernel running"
        if phase.collective_ms is not None
        else "summed kernel time"
    )
    return what + (", less the wait for other ranks" if collective_split(run) else "")


def _launched(run: EngineRun, phase: Phase) -> set[str]:
    return {
        f"{c.op} {c.algo}/{c.proto}"
        for c in run.collectives
        if c.phase == phase.name and c.algo and c.library in NCCL_LIBRARIES
    }


def collective_calls(ev: E.Evidence) -> list:
    """The collectives of a profile per size: calls, time per call, bus bandwidth and share of the
    step, with eager/graph and what NCCL launched. Informational: the numbers other rules weigh."""
    out = []
    for src, run in _profiles(ev):
        rows: list[dict] = []
        for c in run.collectives:
            per_call = c.time_us / c.count if c.time_us and c.count else None
            busbw = _busbw(c, per_call)
            phase = run.phases.get(c.phase) if c.phase else None
            share = (
                (c.time_us / 1000.0 / phase.total_ms)
                if phase and phase.total_ms and c.time_us
                else None
            )
            rows.append(
                {
                    "op": c.op,
                    "size": format_size(c.size_bytes) if c.size_bytes else "size unknown",
                    "dtype": c.dtype,
                    "calls": int(c.count),
                    "mode": "graph" if c.graph else "eager",
                    "us_per_call": round(per_call, 2) if per_call else None,
                    "busbw_gbps": round(busbw, 2) if busbw is not None else None,
                    "share_of_phase": round(share, 3) if share is not None else None,
                    "phase": c.phase,
                    "launched": f"{c.algo}/{c.proto}" if c.algo else None,
                    "size_from": c.size_source,
                    "library": c.library,
                }
            )
        if rows:
            unknown = sum(1 for r in rows if r["size"] == "size unknown")
            out.append(
                Finding(
                    rule="collective-calls",
                    severity="info",
                    confidence="high",
                    title=f"{run.name(src)}: {sum(r['calls'] for r in rows)} collective calls in "
                    + (f"{len(rows)} groups" if len(rows) != 1 else "1 group")
                    + (f" ({unknown} of unknown size{_why_unknown(run)})" if unknown else ""),
                    detail=(
                        "Per operation and size: calls, time per call (kernel time on the GPU, or the host op's "
                        "time on a CPU-only profile), bus bandwidth, the share of its phase, and the "
                        "algorithm/protocol "
                        "in the kernel's name (the kernel NCCL launched; NCCL_DEBUG_SUBSYS=TUNING logs the "
                        "algorithm and "
                        "protocol it chose)."
                    ),
                    evidence={"collectives": rows},
                )
            )
    return out


def _why_unknown(run: EngineRun) -> str:
    """Why some sizes are unknown: graph replays whose capture is not in the profile, or calls
    recorded without their arguments; never a graph on a profile without one."""
    unknown = [c for c in run.collectives if c.size_bytes is None]
    if all(c.graph for c in unknown):
        return ": replayed from graphs"
    return "" if any(c.graph for c in unknown) else ": recorded without their arguments"


def _busbw(c: Collective, per_call_us: float | None) -> float | None:
    """nccl-tests' bus bandwidth (docs/METRICS.md) of one call, where size and group are known."""
    if not c.size_bytes or not per_call_us or not c.group_size or c.group_size < 2:
        return None
    n = c.group_size
    factor = {
        "all_reduce": 2 * (n - 1) / n,
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "broadcast": 1.0,
    }.get(c.op)
    if factor is None:
        return None
    size = c.size_bytes * (n if c.op in ("all_gather",) else 1)
    return size / (per_call_us * 1e3) * factor


RULES = (
    rules_profile_eager.RULES
    + rules_profile_steps.RULES
    + rules_profile_baseline.RULES
    + rules_collective_baseline.RULES
    + (
        nccl_from_kernels,
        collective_calls,
        ranks_skew,
    )
)
