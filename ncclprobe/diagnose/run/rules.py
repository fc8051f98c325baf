"""Hypotheses about where a speculative engine's step time goes, one pure function each: a phase
that runs eagerly while the decode step it is compared with is a graph replay, a verify step that
costs more than its extra tokens explain, and steps that fall off the captured graphs.

Every rule takes the Evidence and returns a list of Finding / RuledOut / NotChecked. Rules never
print and never raise on a trace that lacks a field: missing evidence becomes NotChecked.
`RULES` is every run rule of this family in the order diagnose runs them, with speculative against
its baseline (`rules_speed`) and the collectives' share and cost (`rules_collectives`);
settings-related hypotheses live in `rules_settings`.
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import engine_command, graphs_command, profile_command
from ncclprobe.diagnose.run import rules_collectives, rules_speed
from ncclprobe.diagnose.run.expectations import Expectation, expected_verify_ratio
from ncclprobe.diagnose.run.run_costs import cost_per_token, rounded, share_of_run, spec_runs
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import SPECULATIVE_KINDS, EngineRun, Phase
from ncclprobe.findings import Cost, Finding, NotChecked, Outcome, RuledOut, severity_for_share

GRAPH_COVERAGE_OK = 0.8  # with graphs on, at least this share of step time in replays
NEVER_CAPTURED = ("accept", "host")  # host-side work between replays: no --graphs mode captures it


def eager_phase(ev: E.Evidence) -> list:
    """A speculative phase runs eagerly while the baseline's decode step is a CUDA graph replay:
    the seed case (verify in extend mode without graphs, 2.4x the decode step)."""
    out: list[Outcome] = []
    for src, run in spec_runs(ev):
        if run.source == "profile":
            continue  # rules_profile_eager.eager_steps weighs a profile's steps (GPU idle time)
        decode, source = E.baseline_decode(ev, run.label)
        if decode is None:
            trace = ev.kind == "engine-trace"
            out.append(
                NotChecked(
                    rule="eager-phase",
                    hypothesis="a phase runs without CUDA graphs",
                    missing="no baseline decode step in the trace or --baseline"
                    if trace
                    else "a baseline: a profile of the same server decoding without speculation (--baseline-profile)",
                    next_command=engine_command(ev.config)
                    if trace
                    else profile_command(ev.config.get("engine")),
                )
            )
            continue
        if decode.graphed is None:
            out.append(
                NotChecked(
                    rule="eager-phase",
                    hypothesis="a phase runs without CUDA graphs while decode is captured",
                    missing=f"whether the baseline decode step ({source}) is a graph replay: the profile "
                    "holds no GPU launches (a CPU-only profile)",
                )
            )
            continue
        if not decode.graphed:
            out.append(
                RuledOut(
                    rule="eager-phase",
                    hypothesis="a phase runs without CUDA graphs while decode is captured",
                    reason=f"the baseline decode step ({source}) is not captured either"
                    + (
                        f" (graphs: {ev.config.get('graphs', '?')})"
                        if ev.kind == "engine-trace"
                        else ""
                    )
                    + ": both sides run eagerly, like for like",
                )
            )
            continue
        spec_phases = [p for p in run.phases.values() if p.count and p.kind in SPECULATIVE_KINDS]
        eager = [p for p in spec_phases if p.graphed is False]
        unknown = [p.name for p in spec_phases if p.graphed is None]
        if not eager and unknown:  # not known to be graphed is not graphed: nothing to rule out
            out.append(
                NotChecked(
                    rule="eager-phase",
                    hypothesis="a phase runs without CUDA graphs while decode is captured",
                    missing=f"whether {', '.join(unknown)} of the {run.label} speculative run replayed a "
                    "graph (the evidence does not say)",
                )
            )
            continue
        if not eager:
            out.append(
                RuledOut(
                    rule="eager-phase",
                    hypothesis="a phase runs without CUDA graphs while decode is captured",
                    reason=f"every phase of the {run.label} speculative run is a graph replay, as the decode step is",
                )
            )
        out += [_eager_finding(ev, src, run, phase, decode, source) for phase in eager]
    return out


def _eager_finding(
    ev: E.Evidence, src: str, run: EngineRun, rec: Phase, decode: Phase, source: str
) -> Finding:
    name, n_cycles = rec.name, run.cycles
    rec_ms, decode_ms = rec.median_ms or 0.0, decode.median_ms or 0.0  # steps measured: both known
    steps_per_cycle = rec.count / n_cycles if n_cycles else 1.0
    ev_num: dict[str, object] = {
        "phase": name,
        f"{name}_median_ms": rec.median_ms,
        "decode_median_ms": decode.median_ms,
        "decode_graphed": True,
        f"{name}_graphed": False,
        "steps_per_cycle": round(steps_per_cycle, 3),
    }
    expectation = expected_verify_ratio(ev.config) if rec.kind == "verify" else None
    covers: tuple[str, ...]
    if expectation:
        expected_ms = decode_ms * expectation.ratio
        cost_step = max(0.0, rec_ms - expected_ms)
        applies = expectation.applies(decode_ms, int(ev.config.get("tp") or 1))
        ev_num.update(
            expected_graphed_verify_ms=round(expected_ms, 4),
            expected_ratio=round(expectation.ratio, 3),
            cost_from="model: measured eager verify minus the bytes model's captured verify",
        )
        how = (
            f"measured: the eager verify {rec.median_ms:.3f} ms and the captured decode "
            f"{decode.median_ms:.3f} ms per step. Modelled, not measured: a captured verify would cost "
            f"about {expectation.ratio:.2f}x the decode step ({expected_ms:.3f} ms, the bytes model of the "
            f"model shape), so the model puts the cost of running it eagerly at about "
            f"{cost_step * steps_per_cycle:.3f} ms per cycle: the residual of the measurement over the "
            "model, which also holds whatever else the verify path costs. A captured verify "
            "(the next command) measures it"
            + (
                ""
                if applies
                else "; the model's premise (a bandwidth-bound decode step) does not hold for this "
                "decode step, so the figure is only an order of magnitude"
            )
        )
        # a model's residual: medium at best; low where the bytes model does not apply (expectations)
        confidence = "medium" if applies else "low"
        kind, covers = "modelled", (name, "excess")
        basis = f"the eager {name} step's time above the bytes model's captured {name}"
        cause = (
            "The gap is the verify step's own path (eager launches, and whatever the model leaves out), "
            "not the collectives: NCCL settings cannot close it."
        )
    elif rec.idle_ms is not None:
        # a profile: the GPU sat idle inside each eager step; capture removes the part of that idle
        # time that is kernel launches, not Python, sampling or other host work between them
        cost_step = rec.idle_ms
        ev_num.update(
            {
                f"{name}_device_ms": rounded(rec.device_ms),
                f"{name}_gpu_idle_ms": rounded(rec.idle_ms),
                f"{name}_launches_per_step": rec.launches,
                "cost_from": "measured GPU idle time; that capture removes it is inferred",
            }
        )
        how = (
            f"measured: of its {rec.median_ms:.3f} ms per step the GPU was busy {rec.device_ms:.3f} ms and idle "
            f"{rec.idle_ms:.3f} ms while the host launched {rec.launches.get('kernel', 0):.0f} kernels one by one. "
            f"Inferred: a graph replay removes the launch gaps, up to about {cost_step:.3f} ms per step "
            "(idle time that is Python, sampling or data-dependent host work stays)"
        )
        confidence = "medium"
        cause = "NCCL settings cannot close this gap: the GPU was idle, not in the collectives."
        kind, covers = "profiled", (name, "idle")
        basis = f"the GPU idle time of the eager {name} steps (profiled)"
    else:
        cost_step = rec_ms
        ev_num["cost_from"] = "upper bound: the eager step's whole time"
        how = (
            f"its eager time, {cost_step * steps_per_cycle:.3f} ms per cycle, is the upper bound of what "
            "capturing it can save"
        )
        confidence = "medium"
        cause = (
            "NCCL settings cannot close this gap: it is the step's own path, not the collectives."
        )
        kind, covers = "bound", (name,)
        basis = f"the eager {name} steps' whole time: what capturing them could win at most"
    cost_cycle = cost_step * steps_per_cycle
    cost_token = cost_per_token(run, cost_cycle)
    share = share_of_run(run, cost_token, cost_cycle)
    ev_num.update(
        cost_ms_per_step=round(cost_step, 4),
        cost_ms_per_cycle=round(cost_cycle, 4),
        cost_ms_per_token=rounded(cost_token),
        share_of_time=rounded(share),
    )
    return Finding(
        rule="eager-phase",
        severity=severity_for_share(share),
        confidence=confidence,
        title=f"{name} runs without CUDA graphs while the baseline decode step is captured "
        f"({rec.median_ms:.3f} ms against {decode.median_ms:.3f} ms per step)",
        detail=(
            f"In the {run.label} speculative run the {name} phase ran as individual kernel launches "
            f"({rec.median_ms:.3f} ms median per step) while the decode step it is compared with ({source}) is a "
            f"graph replay ({decode.median_ms:.3f} ms). {how[0].upper() + how[1:]}. {cause}"
        ),
        evidence=ev_num,
        cost=_cost(kind, run, src, cost_token, cost_step, rec.count, basis, covers),
        next_command=graphs_command(ev, name),
    )


def _cost(
    kind: str,
    run: EngineRun,
    src: str,
    cost_token: float | None,
    cost_step: float,
    steps: float,
    basis: str,
    covers: tuple[str, ...],
) -> Cost:
    """A phase's cost per token where the run's tokens are known, else per step; over the run
    `cost_step` x its steps (the ledger's unit)."""
    value, unit = (cost_token, "token") if cost_token is not None else (cost_step, "step")
    kw = {"run": run.name(src), "covers": covers, "total_ms": cost_step * steps}
    if kind == "bound":
        return Cost.bound(value, unit, basis, **kw)
    if kind == "profiled":
        return Cost.profiled(value, unit, basis, **kw)
    return Cost.modelled(value, unit, basis, **kw)


def verify_ratio(ev: E.Evidence) -> list:
    """The verify/decode ratio against what k+1 tokens through the same weights should cost."""
    expectation = expected_verify_ratio(ev.config)
    out: list[Outcome] = []
    for src, run in spec_runs(ev):
        verify = run.first_of_kind("verify")
        decode, source = E.baseline_decode(ev, run.label)
        if (
            expectation is None
            or verify is None
            or decode is None
            or not verify.median_ms
            or not decode.median_ms
        ):
            missing = (
                "the model shape (give --model-config CONFIG.json, the checkpoint's config.json)"
                if expectation is None
                else "a verify phase or a baseline decode step"
            )
            out.append(
                NotChecked(
                    rule="verify-ratio",
                    hypothesis="verify costs more than its extra tokens explain",
                    missing=f"the evidence lacks {missing}",
                )
            )
            continue
        measured = run.verify_decode_ratio or verify.median_ms / decode.median_ms
        nums = {
            "verify_median_ms": verify.median_ms,
            "decode_median_ms": decode.median_ms,
            "measured_ratio": round(measured, 3),
            **expectation.to_json(),
        }
        if measured <= expectation.limit:
            out.append(
                RuledOut(
                    rule="verify-ratio",
                    hypothesis="verify costs more than its extra tokens explain",
                    reason=f"verify/decode = {measured:.2f}, within the {expectation.limit:.2f} that "
                    f"k+1 = {int(ev.config.get('k') or 1) + 1} tokens explain (expected {expectation.ratio:.2f})",
                )
            )
            continue
        out.append(
            _ratio_finding(
                ev, src, run, verify, decode, decode.median_ms, measured, expectation, nums
            )
        )
    return out


def _ratio_finding(
    ev: E.Evidence,
    src: str,
    run: EngineRun,
    verify: Phase,
    decode: Phase,
    decode_ms: float,
    measured: float,
    expectation: Expectation,
    nums: dict,
) -> Finding:
    tp = int(ev.config.get("tp") or 1)
    gbps = expectation.decode_gbps(decode_ms, tp)
    nums["decode_weight_gbps_per_rank"] = round(gbps, 3)
    if not expectation.applies(decode_ms, tp):
        return Finding(
            rule="verify-ratio",
            severity="info",
            confidence="low",
            title=f"verify costs {measured:.2f}x the decode step; the bytes model does not apply to this run",
            detail=(
                f"The decode step moves its weights at {gbps:.3g} GB/s per rank, far below any memory bandwidth: "
                f"it is bound by per-step overheads (launches, Python, collective latency), not by weight bytes, "
                f"so the {expectation.ratio:.2f}x expected from the model shape does not predict its verify step. "
                f"On a GPU with a real model the comparison is meaningful."
            ),
            evidence=nums,
        )
    mismatch = decode.graphed and verify.graphed is False
    excess_step = (measured - expectation.ratio) * decode_ms
    excess_cycle = excess_step * (verify.count / run.cycles if run.cycles else 1.0)
    cost_token = cost_per_token(run, excess_cycle)
    share = share_of_run(run, cost_token, excess_cycle)
    why = (
        "The verify step is eager and the decode step captured (see eager-phase), which explains it."
        if mismatch
        else "Both run the same way (graphs), so the excess is in the verify path itself: "
        "its attention/mask handling at k+1 query rows, or a shape that falls off the captured sizes."
    )
    return Finding(
        rule="verify-ratio",
        severity="warning" if mismatch else severity_for_share(share),
        confidence="high",
        title=f"verify costs {measured:.2f}x the decode step; k+1 tokens explain about {expectation.ratio:.2f}x",
        detail=(
            f"A decode step is bound by weight bandwidth, so a verify step over the same weights should cost "
            f"the bytes ratio, {expectation.ratio:.2f}x (allowance up to {expectation.limit:.2f}x); measured "
            f"{verify.median_ms:.3f} ms against {decode.median_ms:.3f} ms = {measured:.2f}x. {why}"
        ),
        evidence={
            **nums,
            "excess_ms_per_cycle": round(excess_cycle, 4),
            "cost_ms_per_token": rounded(cost_token),
        },
        cost=_cost(
            "modelled",
            run,
            src,
            cost_token,
            max(0.0, excess_step),
            verify.count,
            f"the {verify.name} step's time above the bytes model's ratio to the decode step",
            (verify.name, "excess"),
        ),
        next_command=graphs_command(ev, verify.name),
    )


def graph_coverage(ev: E.Evidence) -> list:
    """With graphs requested, the share of step time spent in graph replays: what is left eager
    pays the host launch path (about 18 us per torch.distributed call on the H200, before kernels)."""
    if ev.kind == "engine-trace" and ev.config.get("graphs") in (None, "none"):
        return []
    out: list[Outcome] = []
    for _, run in _runs_with(ev, "graph_coverage"):
        coverage = run.graph_coverage or 0.0  # _runs_with: every run here has one
        hyp = f"{run.label} {run.mode_text}: steps fall off the captured graphs"
        if coverage >= GRAPH_COVERAGE_OK:
            out.append(
                RuledOut(
                    rule="graph-coverage",
                    hypothesis=hyp,
                    reason=f"{coverage:.0%} of step time is graph replay",
                )
            )
            continue
        names = (
            E.PHASES if run.source == "engine-trace" else list(run.phases)
        )  # the trace's prefill runs once
        eager = [n for n in names if (phase := run.phase(n)) and phase.graphed is False]
        capturable_eager = [
            n for n in eager if n not in NEVER_CAPTURED and run.phases[n].kind != "prefill"
        ]
        if ev.kind != "engine-trace" and not any(p.graphed for p in run.phases.values()):
            continue  # nothing of this profile is a graph replay: eager-launches says it once
        detail = (
            "Steps outside the captured graphs run eagerly: a batch size or token count outside the capture "
            "list, or a phase the graph mode leaves out."
        )
        if ev.kind != "engine-trace":
            detail = (
                f"{coverage:.0%} of the steps' GPU time came from kernels a graph launch issued; the rest was launched "
                f"kernel by kernel ({', '.join(eager) or 'inside otherwise captured steps'})."
            )
        elif (
            not capturable_eager
        ):  # the rest is prefill (once per run), accept and host: no graph mode captures them
            detail = (
                "Every capturable phase is a graph replay; the rest is the prefill (once per run, so a short run "
                "weighs it more), acceptance and host time, which no graph mode captures."
            )
        graphs = f" (--graphs {ev.config.get('graphs')})" if ev.kind == "engine-trace" else ""
        profile = (
            ev.kind != "engine-trace"
        )  # eager-launches carries a profile's cost; this is the overview
        out.append(
            Finding(
                rule="graph-coverage",
                severity="warning" if capturable_eager and not profile else "info",
                confidence="medium" if capturable_eager else "high",
                title=f"{run.label} {run.mode_text}: only {coverage:.0%} of step time is graph replay{graphs}",
                detail=detail,
                evidence={
                    "graph_coverage": coverage,
                    "graphs": ev.config.get("graphs"),
                    "eager_phases": eager,
                },
                next_command=graphs_command(ev, capturable_eager[0]) if capturable_eager else "",
            )
        )
    return out


def _runs_with(ev: E.Evidence, key: str) -> list[tuple[str, EngineRun]]:
    return [
        (src, run) for src, run in ev.all_runs() if src == "trace" and getattr(run, key) is not None
    ]


RULES = (
    eager_phase,
    verify_ratio,
    *rules_speed.RULES,
    *rules_collectives.RULES,
    graph_coverage,
)
