"""Steps launched kernel by kernel while a comparison replays graphs: what CUDA graph capture would
save in this run, per eager phase against a graph-replayed reference (the baseline's, else one of
this run's), and why nothing was weighed when no such pair exists.

Kept apart from the other step rules (`rules_profile_steps`: waiting for the host, glue between
replays, no step found) because it is the one that compares two phases: it reads a reference
(`profile_costs.graphed_reference`) and, for a verify against a decode, the model shape's
expected ratio (`expectations`), and `rules_profile_baseline` reuses its per-phase parts
(`eager_parts`) to add the causes up against a baseline. The speculative phases weighed against a
captured decode are the seed case (`eager-phase`); any other, `eager-launches`.
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import graphs_command, profile_command
from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.diagnose.run.expectations import Expectation, expected_verify_ratio
from ncclprobe.diagnose.run.ledger import IDLE
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import SPECULATIVE_KINDS, EngineRun, Phase
from ncclprobe.findings import Cost, Finding, NotChecked, RuledOut, severity_for_share


def eager_steps(ev: E.Evidence) -> list:
    """Step kinds launched kernel by kernel while a graph replays the reference, as one cause per
    run: what capture would save is each step's GPU idle time above the reference's (the host work
    a replayed step still waits for stays). Speculative phases weighed against a captured decode
    are the seed case (`eager-phase`); any other, `eager-launches`."""
    out = []
    for run in C.profile_runs(ev):
        parts, ruled = eager_parts(ev, run)
        out += ruled + ([_eager_finding(ev, run, parts)] if parts else _no_eager(ev, run))
    return out


def eager_parts(ev: E.Evidence, run: EngineRun) -> tuple[list[dict], list]:
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


def _expected(ev: E.Evidence, phase: Phase, ref: Phase) -> Expectation | None:
    """The model shape's expected verify/decode ratio, where it applies (a verify against a decode)."""
    if phase.kind != "verify" or ref.kind != "decode":
        return None
    return expected_verify_ratio(ev.config)


def _no_eager(ev: E.Evidence, run: EngineRun) -> list:
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


def _eager_part(ev: E.Evidence, phase: Phase, ref: Phase, where: str, from_baseline: bool) -> dict:
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
        expected = (ref.median_ms or 0.0) * expectation.ratio  # measured steps: both known
        part["cost"] = max(0.0, (phase.median_ms or 0.0) - expected)
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


def _eager_finding(ev: E.Evidence, run: EngineRun, parts: list[dict]) -> Finding:
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
        "tokens": toks.count,
        "tokens_from": toks.source or toks.why,
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
        cost=_eager_cost(run, toks, parts, total),
        next_command=graphs_command(ev, phase.name),
    )


def _eager_cost(run: EngineRun, toks: C.Tokens, parts: list[dict], total: float) -> Cost:
    """What capture would save: per token where the run's tokens are known, else per speculative
    cycle or per step of the one eager phase (several eager phases without tokens: per step of
    the largest, the others' parts in the evidence). Modelled where a part rests on the model
    shape's expected ratio, else profiled GPU idle time (host time, inflated by the profiler)."""
    top = max(parts, key=lambda p: p["cost"] * p["phase"].count)
    unit, units = C.unit_of(run, toks, top["phase"])
    covers: tuple = ()
    if unit == "step" and len(parts) > 1:
        total = top["cost"] * top["phase"].count
    if len(parts) == 1 or unit == "step":
        modelled = "expected" in top
        covers = (top["phase"].name, "excess" if modelled else IDLE)
    basis = (
        "the eager steps' GPU idle time above their graph-replayed reference's (profiled)"
        if not any("expected" in p for p in parts)
        else "the eager steps' time above what the model shape puts a captured step at"
    )
    kw = {"run": run.name("trace"), "covers": covers, "total_ms": total}
    if any("expected" in p for p in parts):
        return Cost.modelled(total / units, unit, basis, **kw)
    return Cost.profiled(total / units, unit, basis, inflation=C.PROFILER_INFLATION, **kw)


def _eager_detail(parts: list[dict]) -> str:
    """Measured, per phase; the references once each; then what is inferred from them."""
    refs: dict[str, dict] = {}
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


RULES = (eager_steps,)
