"""Hypotheses only a profile can settle, one pure function each, as in `rules`: steps launched
kernel by kernel while the comparison replays graphs, steps where the GPU waits for the host,
whether NCCL can explain a gap (from the collective kernels actually seen); ranks that hold the
others up are `rules_ranks`'.

They read the same view as every rule (`ncclprobe.evidence.run.view`); on an engine trace they
stay silent (its phases carry no GPU idle time; `rules` covers it).
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import graphs_command, profile_command
from ncclprobe.diagnose.rules_ranks import collective_split, ranks_skew
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, NotChecked, RuledOut, severity_for_share
from ncclprobe.sizes import format_size

HOST_BOUND_IDLE = 0.30  # GPU idle for at least this share of a step: the host sets the pace
HOST_BOUND_MIN_MS = 0.05
MEASURED_KINDS = ("decode", "verify", "draft", "other")
NCCL_GAP_SHARE = 0.5  # collectives that grew by half the gap between two step kinds can explain it


def _profiles(ev: E.Evidence):
    return [(src, run) for src, run in ev.all_runs() if run.source == "profile"]


def eager_launches(ev: E.Evidence) -> list:
    """A step kind that runs as individual kernel launches while the same kind in the baseline
    (or another phase of this run) is a graph replay: the seed case seen from a profile, where
    an engine's speculative steps fall off its CUDA graphs. The speculative phases of a run whose
    baseline decode is captured are `rules.eager_phase`'s; this covers the rest."""
    out = []
    for src, run in _profiles(ev):
        if src != "trace":
            continue
        for phase in run.phases.values():
            if phase.graphed is not False or not phase.count or phase.kind == "prefill":
                continue
            if (
                run.mode == "speculative"
                and phase.kind in ("verify", "draft")
                and E.baseline_decode(ev, run.label)[0]
            ):
                continue  # rules.eager_phase weighs it against the baseline decode
            ref, where = _graphed_reference(ev, run, phase)
            if ref is None:
                continue
            out.append(_eager_launch_finding(ev, run, phase, ref, where))
    if not out and any(src == "trace" for src, _ in _profiles(ev)):
        runs = [run for src, run in _profiles(ev) if src == "trace"]
        if all(
            p.graphed
            for run in runs
            for p in run.phases.values()
            if p.count and p.kind != "prefill"
        ):
            if any(p.graphed for run in runs for p in run.phases.values()):
                out.append(
                    RuledOut(
                        rule="eager-launches",
                        hypothesis="steps run as individual kernel launches",
                        reason="every measured step is a graph replay",
                    )
                )
    return out


def _baseline_reference(ev, kind: str):
    """The baseline's graphed phase to compare a `kind` step with: the same kind, else its decode,
    else its most frequent graphed step of any kind but prefill (a compiled, graph-replayed decode
    records no input shapes, so its kind may be unknown)."""
    for base in ev.baseline:
        same = base.first_of_kind(kind) or base.first_of_kind("decode")
        if same and same.graphed:
            return base, same
        graphed = [p for p in base.phases.values() if p.graphed and p.count and p.kind != "prefill"]
        if graphed:
            return base, max(graphed, key=lambda p: p.count)
    return None, None


def _graphed_reference(ev, run, phase):
    """The graphed phase to compare with: the baseline's (see _baseline_reference), else a graphed
    phase of this run (another kind)."""
    base, same = _baseline_reference(ev, phase.kind)
    if same is not None:
        return (
            same,
            f"the baseline ({base.path or 'baseline'}) replays its {same.name} steps from a graph",
        )
    others = [p for p in run.phases.values() if p.graphed and p.count and p.name != phase.name]
    if others:
        other = max(others, key=lambda p: p.count)
        return other, f"this run replays its {other.name} steps from a graph"
    return None, ""


def _eager_launch_finding(ev, run, phase, ref, where) -> Finding:
    cost = phase.idle_ms or 0.0
    # weigh the gaps against the whole run, not the step: a short eager step (accept, a few tiny
    # kernels) beside graph-replayed ones costs a sliver of the run however idle it is itself
    total = sum(p.median_ms * p.count for p in run.phases.values() if p.median_ms and p.count)
    share = cost * phase.count / total if total else None
    launches = phase.launches.get("kernel", 0)
    return Finding(
        rule="eager-launches",
        severity=severity_for_share(share),
        confidence="high",
        title=(
            f"{phase.name} steps run as individual kernel launches ({phase.median_ms:.3f} ms per step) while "
            f"{ref.name} is a graph replay ({ref.median_ms:.3f} ms per step)"
        ),
        detail=(
            f"In {run.label}, each {phase.name} step launched {launches:.0f} kernels one by one; the GPU was busy "
            f"{phase.device_ms:.3f} ms and idle {phase.idle_ms:.3f} ms of its {phase.median_ms:.3f} ms, waiting for "
            f"the host. Meanwhile {where} ({ref.graph_share:.0%} of its kernel time from graph launches). Capturing "
            f"the {phase.name} step removes the launch gaps: about {cost:.3f} ms per step. NCCL settings cannot close "
            f"this gap: it is host launch overhead."
        ),
        evidence={
            "phase": phase.name,
            "steps": phase.count,
            "median_ms": phase.median_ms,
            "device_ms": phase.device_ms,
            "gpu_idle_ms": phase.idle_ms,
            "kernel_launches_per_step": launches,
            "graph_share": phase.graph_share,
            "reference_phase": ref.name,
            "reference_median_ms": ref.median_ms,
            "reference_graph_share": ref.graph_share,
            "cost_ms_per_step": round(cost, 4),
            "share_of_run_time": None if share is None else round(share, 4),
        },
        cost_ms_per_step=cost,
        next_command=graphs_command(ev, phase.name),
    )


def host_bound(ev: E.Evidence) -> list:
    """Steps in which the GPU sits idle for a large share of the time: the host, not the GPU,
    sets the step time (launches, Python, scheduling between graph replays)."""
    out, checked = [], False
    for src, run in _profiles(ev):
        if src != "trace":
            continue
        for phase in run.phases.values():
            if phase.idle_ms is None or not phase.median_ms or phase.kind == "prefill":
                continue
            checked = True
            share = phase.idle_ms / phase.median_ms
            hyp = f"{phase.name} steps are host-bound"
            if share < HOST_BOUND_IDLE or phase.idle_ms < HOST_BOUND_MIN_MS:
                out.append(
                    RuledOut(
                        rule="host-bound",
                        hypothesis=hyp,
                        reason=f"the GPU is busy {1 - share:.0%} of each {phase.name} step "
                        f"({phase.device_ms:.3f} of {phase.median_ms:.3f} ms)",
                    )
                )
                continue
            eager = phase.graphed is False
            out.append(
                Finding(
                    rule="host-bound",
                    severity="warning" if share >= 0.5 else "info",
                    confidence="high",
                    title=f"{phase.name} steps are host-bound: the GPU idles {share:.0%} of each step "
                    f"({phase.idle_ms:.3f} ms)",
                    detail=(
                        f"Of {phase.median_ms:.3f} ms per {phase.name} step the GPU ran kernels for "
                        f"{phase.device_ms:.3f} ms. "
                        + (
                            "The step launches its kernels one by one, and the host cannot keep up: a graph replay "
                            "(or fewer, fused kernels) is the lever."
                            if eager
                            else "The step is a graph replay, so the waiting is host work between the replays "
                            "(input preparation, sampling, scheduling, a synchronisation)."
                        )
                    ),
                    evidence={
                        "phase": phase.name,
                        "median_ms": phase.median_ms,
                        "device_ms": phase.device_ms,
                        "gpu_idle_ms": phase.idle_ms,
                        "idle_share": round(share, 3),
                        "graphed": phase.graphed,
                        "launches_per_step": phase.launches,
                    },
                    cost_ms_per_step=phase.idle_ms,
                    next_command=graphs_command(ev, phase.name) if eager else "",
                )
            )
    if not checked and _profiles(ev):
        out.append(
            NotChecked(
                rule="host-bound",
                hypothesis="steps are host-bound",
                missing="GPU activity in the profile (GPU idle time inside a step cannot be known without it)",
                next_command=profile_command(ev.config.get("engine")),
            )
        )
    return out


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
    if not any(p.device_ms is not None for _, run in runs for p in run.phases.values()):
        return [
            NotChecked(
                rule="nccl-settings",
                hypothesis=hyp,
                missing="GPU kernels (a CPU-only profile shows no NCCL kernels)",
                next_command=profile_command(ev.config.get("engine")),
            )
        ]
    colls = [c for _, run in runs for c in run.collectives]
    slow, fast = _slowest_pair(ev)
    if not colls:
        return [
            RuledOut(
                rule="nccl-settings",
                hypothesis=hyp,
                reason="no NCCL/RCCL kernel ran in the profiled steps: no NCCL setting acts on them",
            )
        ]
    if slow is None:
        return []
    (run_s, ph_s), (run_f, ph_f) = slow, fast
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


def _slowest_pair(ev):
    """(slow, fast): the eager step kind and the graphed one it is compared with, as (run, phase)."""
    candidates = [
        (run, p)
        for src, run in _profiles(ev)
        if src == "trace"
        for p in run.phases.values()
        if p.count and p.kind in MEASURED_KINDS and p.graphed is False
    ]
    if not candidates:
        return None, None
    run_s, ph_s = max(candidates, key=lambda rp: rp[1].median_ms or 0)
    base, ref = _baseline_reference(ev, ph_s.kind)
    if ref is not None:
        return (run_s, ph_s), (base, ref)
    others = [p for p in run_s.phases.values() if p.graphed and p.count]
    if others:
        return (run_s, ph_s), (run_s, max(others, key=lambda p: p.count))
    return None, None


def _coll_ms_per_step(run, phase) -> float:
    """Per step, the wall time with a collective kernel running (the union of its collective
    kernels: summed kernel time counts overlapping calls twice), less the share spent waiting for
    another rank where the ranks are aligned: what NCCL's transfer could account for."""
    if phase.collective_ms is not None:
        wall = phase.collective_ms
    else:
        calls = [c for c in run.collectives if c.phase == phase.name and c.time_us]
        wall = sum(c.time_us for c in calls) / 1000.0 / phase.count if phase.count else 0.0
    split = collective_split(run)
    return wall * split["transfer"] if split else wall


def _wall_words(run, phase) -> str:
    what = (
        "wall time with a collective kernel running"
        if phase.collective_ms is not None
        else "summed kernel time"
    )
    return what + (", less the wait for other ranks" if collective_split(run) else "")


def _launched(run, phase) -> set[str]:
    return {
        f"{c.op} {c.algo}/{c.proto}" for c in run.collectives if c.phase == phase.name and c.algo
    }


def collective_calls(ev: E.Evidence) -> list:
    """The collectives of a profile per size: calls, time per call, bus bandwidth and share of the
    step, with eager/graph and what NCCL launched. Informational: the numbers other rules weigh."""
    out = []
    for src, run in _profiles(ev):
        rows = []
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
                }
            )
        if rows:
            unknown = sum(1 for r in rows if r["size"] == "size unknown")
            out.append(
                Finding(
                    rule="collective-calls",
                    severity="info",
                    confidence="high",
                    title=f"{run.name(src)}: {sum(r['calls'] for r in rows)} collective calls in {len(rows)} groups"
                    + (f" ({unknown} of unknown size: replayed from graphs)" if unknown else ""),
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


def _busbw(c, per_call_us: float | None) -> float | None:
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


def profile_limits(ev: E.Evidence) -> list:
    """What the profile could not show, as not-checked items with the command that records it."""
    out = []
    for src, run in _profiles(ev):
        if src != "trace":
            continue
        if not run.phases:
            out.append(
                NotChecked(
                    rule="profile-steps",
                    hypothesis="any step-level cause",
                    missing="steps: the profile has no step annotations and no GPU activity to split",
                    next_command=profile_command(ev.config.get("engine")),
                )
            )
        elif not any(p.kind in ("decode", "verify", "draft") for p in run.phases.values()):
            out.append(
                NotChecked(
                    rule="decode-or-verify",
                    hypothesis="verify steps cost more than decode steps",
                    missing="which steps are decode and which verify (no engine annotation, no recorded "
                    "input shapes: record with record_shapes=True)",
                    next_command=profile_command(ev.config.get("engine")),
                )
            )
    return out


RULES = (
    eager_launches,
    host_bound,
    nccl_from_kernels,
    collective_calls,
    ranks_skew,
    profile_limits,
)
