"""Hypotheses about where a speculative engine's time goes, one pure function each.

Every rule takes the Evidence and returns a list of Finding / RuledOut / NotChecked. Rules never
print and never raise on a trace that lacks a field: missing evidence becomes NotChecked.
Settings-related hypotheses live in `rules_settings`.
"""

from __future__ import annotations

from ncclprobe import stats
from ncclprobe.diagnose.commands import (
    draft_command,
    draft_note,
    engine_command,
    fresh,
    graphs_command,
    profile_command,
    sweep_next,
)
from ncclprobe.diagnose.expectations import expected_verify_ratio
from ncclprobe.diagnose.rules_ranks import with_wait_split
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import SPECULATIVE_KINDS
from ncclprobe.findings import Finding, NotChecked, RuledOut, severity_for_share

COLLECTIVE_BOUND_SHARE = 0.5  # at least half the step in collectives: NCCL settings can matter
COLLECTIVE_MINOR_SHARE = 0.15  # below this, no NCCL setting can win much
SWEEP_EXCESS = 2.0  # engine collectives this many times the sweep's time: suspicious
GRAPH_COVERAGE_OK = 0.8  # with graphs on, at least this share of step time in replays
NEVER_CAPTURED = ("accept", "host")  # host-side work between replays: no --graphs mode captures it


def _spec_runs(ev: E.Evidence):
    """The speculative runs under diagnosis that have steps (a server log has none: rules_log)."""
    return [
        (src, run)
        for src, run in ev.all_runs()
        if run.mode == "speculative" and src == "trace" and run.phases
    ]


def eager_phase(ev: E.Evidence) -> list:
    """A speculative phase runs eagerly while the baseline's decode step is a CUDA graph replay:
    the seed case (verify in extend mode without graphs, 2.4x the decode step)."""
    out = []
    for _, run in _spec_runs(ev):
        if run.source == "profile":
            continue  # rules_profile_steps.eager_steps weighs a profile's steps (GPU idle time)
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
        out += [_eager_finding(ev, run, phase, decode, source) for phase in eager]
    return out


def _eager_finding(ev, run, rec, decode, source) -> Finding:
    name, n_cycles = rec.name, run.cycles
    steps_per_cycle = rec.count / n_cycles if n_cycles else 1.0
    ev_num = {
        "phase": name,
        f"{name}_median_ms": rec.median_ms,
        "decode_median_ms": decode.median_ms,
        "decode_graphed": True,
        f"{name}_graphed": False,
        "steps_per_cycle": round(steps_per_cycle, 3),
    }
    expectation = expected_verify_ratio(ev.config) if rec.kind == "verify" else None
    if expectation:
        expected_ms = decode.median_ms * expectation.ratio
        cost_step = max(0.0, rec.median_ms - expected_ms)
        applies = expectation.applies(decode.median_ms, int(ev.config.get("tp") or 1))
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
                f"{name}_device_ms": _r(rec.device_ms),
                f"{name}_gpu_idle_ms": _r(rec.idle_ms),
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
    else:
        cost_step = rec.median_ms
        ev_num["cost_from"] = "upper bound: the eager step's whole time"
        how = (
            f"its eager time, {cost_step * steps_per_cycle:.3f} ms per cycle, is the upper bound of what "
            "capturing it can save"
        )
        confidence = "medium"
        cause = (
            "NCCL settings cannot close this gap: it is the step's own path, not the collectives."
        )
    cost_cycle = cost_step * steps_per_cycle
    cost_token = _cost_per_token(run, cost_cycle)
    share = _share(run, cost_token, cost_cycle)
    ev_num.update(
        cost_ms_per_step=round(cost_step, 4),
        cost_ms_per_cycle=round(cost_cycle, 4),
        cost_ms_per_token=_r(cost_token),
        share_of_time=_r(share),
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
        cost_ms_per_token=cost_token,
        cost_ms_per_step=cost_step,
        next_command=graphs_command(ev, name),
    )


def _cost_per_token(run, cost_cycle: float) -> float | None:
    """A per-cycle cost spread over the tokens a cycle yields (per sequence): from the run's own
    token count where it has one (our trace), else from the acceptance length (profile + log)."""
    if run.new_tokens and run.cycles:
        return run.per_token_ms(cost_cycle * run.cycles)
    tpc = run.tokens_per_cycle()
    return cost_cycle / tpc if tpc else None


def _share(run, cost_token: float | None, cost_cycle: float) -> float | None:
    """What share of the run's time a cost is: per token when both are known, else per cycle."""
    if cost_token is not None and run.ms_per_token:
        return cost_token / run.ms_per_token
    cycle = sum(
        (p.median_ms or 0.0) * (p.count / run.cycles if run.cycles else 1.0)
        for p in run.phases.values()
        if p.kind in SPECULATIVE_KINDS and p.count
    )
    return cost_cycle / cycle if cycle else None


def verify_ratio(ev: E.Evidence) -> list:
    """The verify/decode ratio against what k+1 tokens through the same weights should cost."""
    expectation = expected_verify_ratio(ev.config)
    out = []
    for _, run in _spec_runs(ev):
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
        out.append(_ratio_finding(ev, run, verify, decode, measured, expectation, nums))
    return out


def _ratio_finding(ev, run, verify, decode, measured, expectation, nums) -> Finding:
    tp = int(ev.config.get("tp") or 1)
    gbps = expectation.decode_gbps(decode.median_ms, tp)
    nums["decode_weight_gbps_per_rank"] = round(gbps, 3)
    if not expectation.applies(decode.median_ms, tp):
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
    excess_step = (measured - expectation.ratio) * decode.median_ms
    excess_cycle = excess_step * (verify.count / run.cycles if run.cycles else 1.0)
    cost_token = _cost_per_token(run, excess_cycle)
    share = _share(run, cost_token, excess_cycle)
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
            "cost_ms_per_token": _r(cost_token),
        },
        cost_ms_per_token=cost_token,
        cost_ms_per_step=excess_step,
        next_command=graphs_command(ev, verify.name),
    )


def speculative_slower(ev: E.Evidence) -> list:
    """Speculative slower than its baseline: decompose its time per token into draft, verify and
    overhead, and say what acceptance would break even."""
    out = []
    for _, run in _spec_runs(ev):
        if run.source != "engine-trace":
            continue  # profiles and logs: rules_log weighs their throughputs
        base = E.find_run(ev.runs, mode="baseline", label=run.label) or E.find_run(
            ev.baseline, mode="baseline"
        )
        if not base or not base.tokens_per_s or not run.tokens_per_s:
            out.append(
                NotChecked(
                    rule="speculative-slower",
                    hypothesis="speculative slower than the baseline",
                    missing="no baseline run with tokens/s to compare with",
                )
            )
            continue
        out.append(_compare_speeds(ev, run, base))
    return out


def _compare_speeds(ev, run, base):
    """The noise rule of `ncclprobe.stats` on the two runs' tokens/s: with repeats on both sides
    (run-engine --repeats) their spreads and the 5 % floor decide, else the noise floor of one run
    on this device (a shared CPU's tokens/s vary 2x, a GPU's a few percent). Faster beyond the noise
    rules the hypothesis out, slower is a finding, anything else says what would settle it."""
    hyp = "speculative slower than the baseline"
    verdict = stats.compare(
        _speed_sample(run),
        _speed_sample(base),
        single="gpu" if ev.config.get("device") == "cuda" else "cpu",
    )
    speedup = run.tokens_per_s / base.tokens_per_s
    figures = f"speculative {_rate(run)} against baseline {_rate(base)} tok/s ({speedup:.2f}x)"
    if verdict.verdict == stats.FASTER:
        return RuledOut(
            rule="speculative-slower",
            hypothesis=hyp,
            reason=f"{run.label}: speculative is faster beyond the noise: {figures}; {verdict.describe()}",
        )
    if verdict.verdict == stats.SLOWER:
        return _slower_finding(ev, run, base, verdict)
    repeats = 2 * max(len(run.tokens_per_s_repeats), 1) + 1
    if verdict.basis == stats.NOISE_FLOOR:
        return NotChecked(
            rule="speculative-slower",
            hypothesis=hyp,
            missing=f"{run.label}: a spread to judge {figures} by: one measurement each, and the "
            f"difference is inside the {verdict.floor:.0%} a single run's tokens/s can vary by on this "
            "device",
            next_command=engine_command(
                ev.config, repeats=max(repeats, 5), trace_out="trace-repeats.json"
            ),
        )
    return Finding(
        rule="speculative-slower",
        severity="info",
        confidence="low",
        title=f"{run.label}: speculative against baseline is inconclusive: the difference lies "
        f"inside the spread of the repeats ({figures})",
        detail="The repeats' spreads overlap, or the difference is below the 5 % floor, so the "
        f"measurements cannot tell which mode is faster; nothing is ruled out ({verdict.describe()}). "
        "More repeats or a longer run narrow them.",
        evidence={
            "speculative_tokens_per_s": list(run.tokens_per_s_repeats),
            "baseline_tokens_per_s": list(base.tokens_per_s_repeats),
            "noise_rule": verdict.to_json(),
        },
        next_command=engine_command(ev.config, repeats=repeats, trace_out="trace-repeats.json"),
    )


def _speed_sample(run) -> stats.Sample:
    """A run's tokens/s as the noise rule's sample: its repeats, else its one measurement."""
    return stats.Sample.of_rates(run.tokens_per_s_repeats or [run.tokens_per_s])


def _rate(run) -> str:
    spread = run.speed_range()
    return f"{run.tokens_per_s:.1f}" + (
        f" ({spread[0]:.1f}-{spread[1]:.1f} over {len(run.tokens_per_s_repeats)} repeats)"
        if spread
        else ""
    )


def _slower_finding(ev, run, base, verdict: stats.Comparison) -> Finding:
    parts = {
        name: run.per_token_ms(run.phase(name).total_ms if run.phase(name) else 0.0) or 0.0
        for name in ("draft", "verify", *E.OVERHEAD_PHASES)
    }
    overhead = sum(parts[name] for name in E.OVERHEAD_PHASES)
    ms_token = run.ms_per_token or 1000.0 / run.tokens_per_s
    unaccounted = max(0.0, ms_token - parts["draft"] - parts["verify"] - overhead)
    cycle_ms = sum(
        run.per_cycle_ms(name) or 0.0 for name in ("draft", "verify", *E.OVERHEAD_PHASES)
    )
    decode_ms = base.ms_per_token or 1000.0 / base.tokens_per_s
    tpc = run.tokens_per_cycle()
    breakeven = (
        cycle_ms / decode_ms if decode_ms and cycle_ms else None
    )  # tokens a cycle must yield to match the baseline
    nums = {
        "speculative_tokens_per_s": _r(run.tokens_per_s),
        "baseline_tokens_per_s": _r(base.tokens_per_s),
        "speculative_ms_per_token": _r(ms_token),
        "baseline_ms_per_token": _r(decode_ms),
        "draft_ms_per_token": _r(parts["draft"]),
        "verify_ms_per_token": _r(parts["verify"]),
        "overhead_ms_per_token": _r(overhead + unaccounted),
        "cycle_ms": _r(cycle_ms),
        "tokens_per_cycle": _r(tpc),
        "breakeven_tokens_per_cycle": _r(breakeven),
        "noise_rule": verdict.to_json(),
    }
    biggest = max(
        ("draft", "verify", "overhead"),
        key=lambda k: {
            "draft": parts["draft"],
            "verify": parts["verify"],
            "overhead": overhead + unaccounted,
        }[k],
    )
    fix = _faster_spec_command(ev, run, base, tpc, breakeven)
    arithmetic = (
        f"A cycle costs {cycle_ms:.3f} ms, so it must yield {breakeven:.2f} tokens to break even; it yields "
        f"{tpc if tpc is not None else float('nan'):.2f}. "
        if breakeven
        else ""
    )
    single = verdict.basis == stats.NOISE_FLOOR
    return Finding(
        rule="speculative-slower",
        severity="warning",
        confidence="medium" if single else "high",
        title=f"speculative {run.tokens_per_s:.1f} tok/s is slower than the baseline's "
        f"{base.tokens_per_s:.1f} tok/s beyond the noise",
        detail=(
            f"Per generated token: draft {parts['draft']:.3f} ms + verify {parts['verify']:.3f} ms + overhead "
            f"(accept, draft extend, host, unaccounted) {overhead + unaccounted:.3f} ms = {ms_token:.3f} ms, "
            f"against {decode_ms:.3f} ms per token for the baseline. {arithmetic}The largest share is {biggest}. "
            f"Slower {verdict.describe()}."
            + (" More repeats give it a spread (run-engine --repeats)." if single else "")
        ),
        evidence=nums,
        cost_ms_per_token=ms_token - decode_ms,
        next_command=fix,
    )


def _faster_spec_command(ev, run, base, tpc, breakeven) -> str:
    """Graphs first when verify is eager against a captured decode; else a better draft when the
    cycle yields fewer tokens than break-even; else the loss is outside the cycle (prefill, host):
    capture everything on a GPU, or amortise it over a longer run on CPU."""
    verify, decode = run.first_of_kind("verify"), base.first_of_kind("decode")
    if decode and verify and decode.graphed and verify.graphed is False:
        return graphs_command(ev, verify.name)
    if tpc is not None and breakeven is not None and tpc < breakeven:
        draft = fresh("draft-trained.safetensors")
        return (
            f"{draft_command(ev.config, draft)} && "
            f"{engine_command(ev.config, draft=draft, trace_out='trace-trained-draft.json', train_missing_draft=False)}"
            f"  # the cycle yields {tpc:.2f} tokens, break-even needs {breakeven:.2f}: a trained draft; "
            f"{draft_note(ev.config)}"
        )
    if ev.config.get("device") == "cuda":
        return graphs_command(ev, "verify")
    longer = 4 * int(ev.config.get("new_tokens") or 32)
    return (
        engine_command(ev.config, new_tokens=longer, trace_out="trace-longer.json")
        + "  # the cycle beats break-even: the loss is prefill and host time, which a longer run amortises"
    )


def collective_share(ev: E.Evidence) -> list:
    """How much of the step the collectives take: the ceiling on what any NCCL setting can win.
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
                hypothesis="NCCL settings as the main lever",
                reason=f"collectives take at most {share:.0%} of the step time ({worst}): no NCCL setting can "
                f"win more than {share * total:.3f} ms of {of}",
            )
        ]
    return []


def _step_ms(run) -> float:
    """The median time of the step kind that takes most of a profile's time (prefill aside)."""
    steps = [p for p in run.phases.values() if p.count and p.median_ms and p.kind != "prefill"]
    return max(steps, key=lambda p: p.median_ms * p.count).median_ms if steps else 0.0


def _steps_ms(run) -> float:
    """All the time of a profile's steps but the prefill (a profile counts steps, not tokens)."""
    return sum(
        p.median_ms * p.count
        for p in run.phases.values()
        if p.count and p.median_ms and p.kind != "prefill"
    )


def _bound_finding(ev, bound: dict) -> Finding:
    worst = max(bound, key=lambda name: bound[name][0])
    share, run = bound[worst]
    sizes = _all_sizes(ev)
    per_step = run.ms_per_token or _step_ms(run)
    count = (
        f"{run.per_token_count:.1f} collectives and {run.per_token_bytes:.0f} bytes per token "
        if run.per_token_count is not None
        else ""
    )
    finding = Finding(
        rule="collective-bound",
        severity="warning",
        confidence="high",
        title=f"collectives take {share:.0%} of the step time ({worst}"
        + (f", and {len(bound) - 1} more run(s) at 50% or more)" if len(bound) > 1 else ")"),
        detail=(
            f"{count}The collectives take {share:.0%} of the step: here the collective path is what to work on: "
            + (
                "fewer or larger collectives, a replicated draft. This run used gloo, which NCCL settings do not "
                "affect: a sweep of its sizes shows gloo's cost, and NCCL settings need a GPU run to compare."
                if _gloo(ev)
                else "NCCL settings, fewer or larger collectives, a replicated draft. Measure the engine's "
                "own sizes and "
                "compare settings."
            )
        ),
        evidence={
            "collective_share_by_run": {name: round(pair[0], 3) for name, pair in bound.items()},
            "per_token_count": run.per_token_count,
            "per_token_bytes": run.per_token_bytes,
            "ms_per_token": run.ms_per_token,
            "sizes_bytes": sizes,
        },
        cost_ms_per_token=share * (run.ms_per_token or 0.0) or None,
        cost_ms_per_step=share * per_step,
        next_command=sweep_next(ev, sizes),
    )
    # profiles of several ranks: the share is part waiting for a rank, part moving data
    unit = "token" if run.ms_per_token else "step"
    return with_wait_split(finding, run, share, per_step, COLLECTIVE_BOUND_SHARE, unit)


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
    from ncclprobe.diagnose.sweep_match import compare_calls, compare_run

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


def graph_coverage(ev: E.Evidence) -> list:
    """With graphs requested, the share of step time spent in graph replays: what is left eager
    pays the host launch path (about 18 us per torch.distributed call on the H200, before kernels)."""
    if ev.kind == "engine-trace" and ev.config.get("graphs") in (None, "none"):
        return []
    out = []
    for _, run in _runs_with(ev, "graph_coverage"):
        coverage = run.graph_coverage
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
        eager = [n for n in names if run.phase(n) and run.phase(n).graphed is False]
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


def _gloo(ev: E.Evidence) -> bool:
    return ev.kind == "engine-trace" and ev.config.get("backend") == "gloo"


def _all_sizes(ev: E.Evidence) -> list[int]:
    return sorted({size for _, run in ev.all_runs() for size in run.collective_sizes()})


def _runs_with(ev: E.Evidence, key: str):
    return [
        (src, run) for src, run in ev.all_runs() if src == "trace" and getattr(run, key) is not None
    ]


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


RULES = (
    eager_phase,
    verify_ratio,
    speculative_slower,
    collective_share,
    collectives_vs_sweep,
    graph_coverage,
)
