"""Hypotheses about a profile's steps, one pure function each: steps launched kernel by kernel
while a comparison replays graphs, steps where the GPU waits for the host, the small eager kernels
between graph replays, and a profile in which no step could be found (how the causes add up
against a baseline: `rules_profile_baseline`).

Every cost is per step, per token and a share of the run's profiled time (`profile_costs`); the
severity follows the share a cause could win (`findings.severity_for_share`), and each text says
what the profile measured and what is inferred from it. On an engine trace these stay silent (its
phases carry no GPU idle time; `rules` covers it).
"""

from __future__ import annotations

from ncclprobe.diagnose import profile_costs as C
from ncclprobe.diagnose.commands import graphs_command, profile_command
from ncclprobe.diagnose.expectations import expected_verify_ratio
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import SPECULATIVE_KINDS
from ncclprobe.findings import Finding, NotChecked, RuledOut, severity_for_share

HOST_BOUND_IDLE = 0.30  # GPU idle for at least this share of a step: the host sets the pace
HOST_BOUND_MIN_MS = 0.05  # ... and for at least this long (a short step's idle is launch latency)
GLUE_WARN = 0.10  # glue between replays: a warning from a tenth of the run (never an error)


def _runs(ev: E.Evidence):
    return [run for src, run in ev.all_runs() if run.source == "profile" and src == "trace"]


def eager_steps(ev: E.Evidence) -> list:
    """Step kinds launched kernel by kernel while a graph replays the reference, as one cause per
    run: what capture would save is each step's GPU idle time above the reference's (the host work
    a replayed step still waits for stays). Speculative phases weighed against a captured decode
    are the seed case (`eager-phase`); any other, `eager-launches`."""
    out = []
    for run in _runs(ev):
        parts, ruled = eager_parts(ev, run)
        out += ruled + ([_eager_finding(ev, run, parts)] if parts else _no_eager(ev, run))
    return out


def eager_parts(ev, run) -> tuple[list[dict], list]:
    """Per eager phase with a graphed reference: what capture would save per step (`cost`) and
    the words for it; and the phases where it would save nothing, ruled out."""
    parts, ruled = [], []
    for phase in run.phases.values():
        if phase.graphed is not False or not phase.count or phase.kind == "prefill":
            continue
        ref, where, from_baseline = C.graphed_reference(ev, run, phase)
        if ref is None:
            continue
        part = _eager_part(ev, phase, ref, where, from_baseline)
        if part["cost"] > 0:
            parts.append(part)
            continue
        ruled.append(
            RuledOut(
                rule="eager-launches",
                hypothesis=f"{phase.name} steps lose time to individual kernel launches",
                reason=f"the GPU idles {phase.idle_ms or 0.0:.3f} ms of each {phase.name} step, no more "
                f"than in the replayed {ref.name} steps ({ref.idle_ms or 0.0:.3f} ms): capture would "
                "save nothing measurable",
            )
        )
    return parts, ruled


def _expected(ev, phase, ref):
    """The model shape's expected verify/decode ratio, where it applies (a verify against a decode)."""
    if phase.kind != "verify" or ref.kind != "decode":
        return None
    return expected_verify_ratio(ev.config)


def _no_eager(ev, run) -> list:
    """Why no eager step was weighed: every step replayed, nothing graphed to compare with, or
    graphs that cannot be seen (a CPU-only profile)."""
    steps = [p for p in run.phases.values() if p.count and p.kind != "prefill"]
    out = []
    if steps and all(p.graphed for p in steps):
        out.append(
            RuledOut(
                rule="eager-launches",
                hypothesis="steps run as individual kernel launches",
                reason="every measured step is a graph replay",
            )
        )
    if run.mode != "speculative":
        return out
    hyp = "a phase runs without CUDA graphs while decode is captured"
    decode, source = E.baseline_decode(ev, run.label)
    speculative = [p for p in steps if p.kind in SPECULATIVE_KINDS]
    if decode is not None and decode.graphed is None:
        missing = (
            f"whether the baseline decode step ({source}) is a graph replay: the profile holds no GPU "
            "launches (a CPU-only profile)"
        )
        return out + [NotChecked(rule="eager-phase", hypothesis=hyp, missing=missing)]
    unknown = [p.name for p in speculative if p.graphed is None]
    if decode is not None and decode.graphed and unknown:
        missing = (
            f"whether the {', '.join(unknown)} steps are graph replays: the profile holds none of "
            "their GPU launches (a CPU-only profile, or the kernels trimmed away)"
        )
        return out + [NotChecked(rule="eager-phase", hypothesis=hyp, missing=missing)]
    if decode is not None and decode.graphed and all(p.graphed for p in speculative):
        reason = f"every phase of the {run.label} speculative run is a graph replay, as the decode step is"
        return out + [RuledOut(rule="eager-phase", hypothesis=hyp, reason=reason)]
    if decode is not None and decode.graphed is False:
        reason = f"the baseline decode step ({source}) is not captured either: both sides run eagerly, like for like"
        return out + [RuledOut(rule="eager-phase", hypothesis=hyp, reason=reason)]
    if decode is None:
        given = (ev.baseline[0].path or "--baseline-profile") if ev.baseline else ""
        missing = (
            f"a decode step in the baseline given ({given}): none of its steps could be told a decode"
            if given
            else "a baseline: a profile of the same engine decoding without speculation, with its graphs "
            "(--baseline-profile)"
        )
        return out + [
            NotChecked(
                rule="eager-phase",
                hypothesis=hyp,
                missing=missing,
                next_command=profile_command(ev.config.get("engine")),
            )
        ]
    return out


def _eager_part(ev, phase, ref, where, from_baseline) -> dict:
    """One eager phase against its reference: what capture would save per step (`cost`), and the
    words for what was measured and what is inferred."""
    expectation = _expected(ev, phase, ref)
    spread = phase.idle_share_range
    measured = (
        f"{phase.count} {phase.name} steps each launched {phase.launches.get('kernel', 0):.0f} kernels one by "
        f"one in {phase.median_ms:.3f} ms, the GPU idle {phase.idle_ms or 0.0:.3f} ms of it"
        + (f" ({spread[0]:.0%}-{spread[1]:.0%} over the steps)" if spread else "")
    )
    part = {
        "phase": phase,
        "ref": ref,
        "where": where,
        "from_baseline": from_baseline,
        "measured": measured,
    }
    if expectation:
        expected = ref.median_ms * expectation.ratio
        part["cost"] = max(0.0, phase.median_ms - expected)
        part["expected"] = (expected, expectation.ratio)
        part["inferred"] = (
            f"from the model's shape, not measured: a captured {phase.name} should cost about "
            f"{expectation.ratio:.2f}x the decode step ({expected:.3f} ms, the bytes it moves), so running it "
            f"eagerly costs {part['cost']:.3f} ms per step beyond that estimate"
        )
    else:
        part["cost"] = max(0.0, (phase.idle_ms or 0.0) - (ref.idle_ms or 0.0))
        part["inferred"] = f"{part['cost']:.3f} ms per {phase.name} step"
    return part


def _eager_finding(ev, run, parts) -> Finding:
    toks = C.tokens(run)
    total = sum(p["cost"] * p["phase"].count for p in parts)
    token_cost, share = C.per_token(total, toks), C.share(total, run)
    top = max(parts, key=lambda p: p["cost"] * p["phase"].count)
    phase, ref = top["phase"], top["ref"]
    names = ", ".join(p["phase"].name for p in parts)
    speculative = any(
        p["phase"].kind in SPECULATIVE_KINDS and p["ref"].kind == "decode" for p in parts
    )
    evidence = {
        "phase": phase.name,
        "reference_phase": ref.name,
        "phases": {
            p["phase"].name: {
                "steps": p["phase"].count,
                "median_ms": p["phase"].median_ms,
                "gpu_idle_ms": p["phase"].idle_ms,
                "reference_phase": p["ref"].name,
                "reference_gpu_idle_ms": p["ref"].idle_ms,
                "cost_ms_per_step": round(p["cost"], 4),
            }
            for p in parts
        },
        "cost_ms_per_token": None if token_cost is None else round(token_cost, 4),
        "cost_per_token_is": "exact" if toks.exact else "an upper bound",
        "share_of_run_time": None if share is None else round(share, 4),
    }
    if "expected" in top:
        evidence.update(
            expected_graphed_verify_ms=round(top["expected"][0], 4),
            expected_ratio=round(top["expected"][1], 3),
        )
    return Finding(
        rule="eager-phase" if speculative else "eager-launches",
        severity=severity_for_share(share),
        confidence="medium" if all(p["from_baseline"] for p in parts) else "low",
        title=(
            f"{names} steps run as individual kernel launches while {ref.name} is a graph replay "
            f"({phase.median_ms:.3f} against {ref.median_ms:.3f} ms per step): "
            f"{C.per_token_words(token_cost, toks)}, {share or 0.0:.0%} of the run"
        ),
        detail=_eager_detail(parts),
        evidence=evidence,
        cost_ms_per_token=token_cost,
        cost_ms_per_step=top["cost"],
        next_command=graphs_command(ev, phase.name),
    )


def _eager_detail(parts) -> str:
    """Measured, per phase; the references once each; then what is inferred from them."""
    refs = {}
    for p in parts:
        refs.setdefault(p["ref"].name, p)
    measured = "; ".join(p["measured"] for p in parts)
    where = "; ".join(
        f"{p['where']} ({p['ref'].median_ms:.3f} ms per step, {p['ref'].idle_ms or 0.0:.3f} ms of it GPU idle)"
        for p in refs.values()
    )
    modelled = [p["inferred"] for p in parts if "expected" in p]
    replayed = [p["inferred"] for p in parts if "expected" not in p]
    inferred = modelled + (
        [
            "a graph replay removes the launch gaps but not the host work a replayed step still waits for "
            f"(sampling, stopping checks, Python between steps, measured in {', '.join(refs)}), so capture "
            "would save about " + ", ".join(replayed)
        ]
        if replayed
        else []
    )
    return (
        f"Measured: {measured}. Meanwhile {where}. Inferred: {'; '.join(inferred)}. "
        "NCCL settings do not act on this time."
    )


def host_bound(ev: E.Evidence) -> list:
    """Steps in which the GPU sits idle for a large share of the time, in every step (the 10th
    percentile of the steps' idle share, not their median), where no graphed reference tells how
    much of it capture would remove: the host sets the pace. Eager steps with a reference and
    graph replays are weighed by eager_steps and graph_glue."""
    out, checked = [], False
    for run in _runs(ev):
        toks = C.tokens(run)
        for phase in run.phases.values():
            if phase.idle_ms is None or not phase.median_ms or phase.kind == "prefill":
                continue
            checked = True
            low, high = phase.idle_share_range or (0.0, 0.0)
            hyp = f"{phase.name} steps are host-bound"
            idle = high >= HOST_BOUND_IDLE and phase.idle_ms >= HOST_BOUND_MIN_MS
            weighed = phase.graphed or C.graphed_reference(ev, run, phase)[0] is not None
            if idle and weighed:
                continue  # graph_glue or eager_steps weigh this idle time against a reference
            if not idle:
                out.append(
                    RuledOut(
                        rule="host-bound",
                        hypothesis=hyp,
                        reason=f"{_most_steps(phase)} the GPU is busy at least {_share(1 - high)} of the "
                        f"step ({phase.device_ms or 0.0:.3f} of {phase.median_ms:.3f} ms at the median)",
                    )
                )
                continue
            out.append(_host_bound_finding(ev, run, phase, low, high, toks))
    if not checked and _runs(ev):
        out.append(
            NotChecked(
                rule="host-bound",
                hypothesis="steps are host-bound",
                missing="GPU activity in the profile (GPU idle time inside a step cannot be known without it)",
                next_command=profile_command(ev.config.get("engine")),
            )
        )
    return out


def _most_steps(phase) -> str:
    """Which steps the 90th percentile of the idle share speaks for: 9 of 10 only where there are
    ten; one step is itself."""
    if phase.count == 1:
        return f"in the one {phase.name} step"
    if phase.count < 10:
        return f"in the {phase.count} {phase.name} steps (their 90th percentile)"
    return f"in 9 of 10 {phase.name} steps"


def _share(value: float) -> str:
    """A share as a percentage that never rounds a short fall up to 100 % nor a small part down to
    0 %."""
    return f"{value:.1%}" if 0.995 <= value < 1.0 or 0.0 < value < 0.01 else f"{value:.0%}"


def _host_bound_finding(ev, run, phase, low, high, toks) -> Finding:
    every = low >= HOST_BOUND_IDLE
    syncs = phase.launches.get("sync", 0)
    total = phase.idle_ms * phase.count
    share, token_cost = C.share(total, run), C.per_token(total, toks)
    severity = severity_for_share(share) if every else "info"
    return Finding(
        rule="host-bound",
        severity="warning" if severity == "error" else severity,
        confidence="medium" if every else "low",
        title=(
            f"{phase.name} steps wait for the host: the GPU idles {phase.idle_ms:.3f} ms of each "
            f"{phase.median_ms:.3f} ms step ({low:.0%}-{high:.0%} over the steps), "
            f"{C.per_token_words(token_cost, toks)}, {share or 0.0:.0%} of the run"
        ),
        detail=(
            f"Measured: of {phase.median_ms:.3f} ms per {phase.name} step the GPU ran kernels for "
            f"{phase.device_ms or 0.0:.3f} ms; the rest it waited for the host, "
            + ("in every step" if every else "in some steps only")
            + f" ({phase.launches.get('kernel', 0):.0f} kernel launches and {syncs:.0f} "
            f"host synchronisation{'' if syncs == 1 else 's'} per step). Not measured here: how much "
            "of that wait is the launches themselves (a graph replay or fused kernels remove it) and "
            "how much Python, sampling or host work that depends on the data (which capture keeps). "
            "A profile of the same run with its steps captured (--baseline-profile) tells the two apart."
        ),
        evidence={
            "phase": phase.name,
            "median_ms": phase.median_ms,
            "device_ms": phase.device_ms,
            "gpu_idle_ms": phase.idle_ms,
            "idle_share_p10_p90": (round(low, 3), round(high, 3)),
            "graphed": phase.graphed,
            "launches_per_step": phase.launches,
            "share_of_run_time": None if share is None else round(share, 4),
        },
        cost_ms_per_token=token_cost,
        cost_ms_per_step=phase.idle_ms,
        next_command=graphs_command(ev, phase.name) if phase.graphed is False else "",
    )


def graph_glue(ev: E.Evidence) -> list:
    """Graph-replayed steps that also launch eager kernels: the host's work between replays
    (sampling, stopping checks, the next inputs) around a few small kernels. What it costs is the
    step's time outside the replay's kernels; at most a warning, the graph itself is replayed."""
    out = []
    for run in _runs(ev):
        for phase in run.phases.values():
            kernels = phase.launches.get("kernel", 0)
            if not phase.graphed or phase.graph_ms is None or not kernels or not phase.median_ms:
                continue
            if phase.kind == "prefill":
                continue  # once per run: its eager kernels are no per-token cost
            glue = max(0.0, phase.median_ms - phase.graph_ms)
            if glue <= 0.0:  # the replay's kernels span the whole step: nothing runs beside them
                out.append(
                    RuledOut(
                        rule="graph-glue",
                        hypothesis=f"{phase.name} steps lose time to eager work between graph replays",
                        reason=f"the graph replay's kernels span {phase.graph_ms:.3f} ms, at least the "
                        f"whole {phase.median_ms:.3f} ms step: the eager kernels beside it overlap the replay",
                    )
                )
                continue
            share = C.share(glue * phase.count, run)
            tokens = phase.tokens_kept / phase.count if phase.tokens_kept else None
            unit = "token" if tokens else f"{phase.name} step"
            per = glue / tokens if tokens else glue
            out.append(
                Finding(
                    rule="graph-glue",
                    severity="warning" if (share or 0.0) >= GLUE_WARN else "info",
                    confidence="high",
                    title=(
                        f"the host runs {kernels / (tokens or 1.0):g} small eager "
                        f"kernel{'' if kernels / (tokens or 1.0) == 1 else 's'} per {unit} between "
                        f"graph replays: {per:.3f} ms/{unit}, {_share(glue / phase.median_ms)} of the {unit}"
                    ),
                    detail=(
                        f"Measured per {phase.name} step: the graph replay's kernels span {phase.graph_ms:.3f} ms "
                        f"on the GPU, the step {phase.median_ms:.3f} ms; the other {glue:.3f} ms are "
                        f"{kernels:g} eager kernel{'' if kernels == 1 else 's'}, {phase.launches.get('memcpy', 0):g} "
                        f"cop{'y' if phase.launches.get('memcpy', 0) == 1 else 'ies'} and the host's work "
                        "between replays (sampling, stopping checks, the next step's inputs, a synchronisation). "
                        "The lever is that host work, not the graph and not NCCL: sample and check stopping on "
                        "the GPU inside the captured step, synchronise less often, keep the loop's inputs on "
                        "the device."
                    ),
                    evidence={
                        "phase": phase.name,
                        "steps": phase.count,
                        "median_ms": phase.median_ms,
                        "graph_gpu_ms": phase.graph_ms,
                        "glue_ms_per_step": round(glue, 4),
                        "eager_kernels_per_step": kernels,
                        "share_of_run_time": None if share is None else round(share, 4),
                    },
                    cost_ms_per_token=per if tokens else None,
                    cost_ms_per_step=glue,
                )
            )
    return out


def profile_limits(ev: E.Evidence) -> list:
    """What the profile could not show. No step at all is a finding, not a silence: a run with no
    findings must be a healthy run, not an unread one."""
    out = []
    for run in _runs(ev):
        if not run.phases:
            out.append(
                Finding(
                    rule="profile-steps",
                    severity="warning",
                    confidence="high",
                    title="no step could be found in the profile: nothing in it was diagnosed",
                    detail=(
                        "The profile holds no step annotation (SGLang, vLLM, ncclprobe, ProfilerStep#N), no "
                        "repeated forward pass in its kernels (no embedding lookup, graph replay or repeated "
                        "kernel sequence) and no bursts of GPU work to split. Record it with CPU and CUDA "
                        "activity, around at least two steps of the engine."
                    ),
                    next_command=profile_command(ev.config.get("engine")),
                )
            )
        elif not any(p.kind in ("decode", "verify", "draft") for p in run.phases.values()):
            out.append(
                NotChecked(
                    rule="decode-or-verify",
                    hypothesis="verify steps cost more than decode steps",
                    missing="which steps are decode and which verify (no engine annotation, no "
                    "token-embedding lookup with its input shape: record with record_shapes=True)",
                    next_command=profile_command(ev.config.get("engine")),
                )
            )
    return out


RULES = (eager_steps, host_bound, graph_glue, profile_limits)
