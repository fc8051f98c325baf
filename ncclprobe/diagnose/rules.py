"""Hypotheses about where a speculative engine's time goes, one pure function each.

Every rule takes the Evidence and returns a list of Finding / RuledOut / NotChecked. Rules never
print and never raise on a trace that lacks a field: missing evidence becomes NotChecked.
Settings-related hypotheses live in `rules_settings`.
"""

from __future__ import annotations

from ncclprobe.diagnose import evidence as E
from ncclprobe.diagnose.commands import engine_command, engine_sizes, sizes_arg
from ncclprobe.diagnose.expectations import expected_verify_ratio
from ncclprobe.diagnose.findings import Finding, NotChecked, RuledOut, severity_for_share

GRAPH_PHASES = ("verify", "draft", "draft_extend")
COLLECTIVE_BOUND_SHARE = 0.5     # at least half the step in collectives: NCCL settings can matter
COLLECTIVE_MINOR_SHARE = 0.15    # below this, no NCCL setting can win much
SWEEP_EXCESS = 2.0               # engine collectives this many times the sweep's time: suspicious
SLOWER_NOISE = 0.05              # a speculative run within 5% of the baseline: timing noise, not a finding
GRAPH_COVERAGE_OK = 0.8          # with graphs on, at least this share of step time in replays
NEVER_CAPTURED = ("accept", "host")   # host-side work between replays: no --graphs mode captures it


def _spec_runs(ev: E.Evidence):
    return [(src, run) for src, run in ev.all_runs() if run.get("mode") == "speculative" and src == "trace"]


def eager_phase(ev: E.Evidence) -> list:
    """A speculative phase runs eagerly while the baseline's decode step is a CUDA graph replay:
    the seed case (verify in extend mode without graphs, 2.4x the decode step)."""
    out = []
    for _, run in _spec_runs(ev):
        decode, source = E.baseline_decode(ev, run.get("label"))
        if decode is None:
            out.append(NotChecked(rule="eager-phase", hypothesis="a phase runs without CUDA graphs",
                                  missing="no baseline decode step in the trace or --baseline",
                                  next_command=engine_command(ev.config)))
            continue
        if not decode.get("graphed"):
            out.append(RuledOut(rule="eager-phase", hypothesis="a phase runs without CUDA graphs while decode is captured",
                                reason=f"the baseline decode step ({source}) is not captured either "
                                       f"(graphs: {ev.config.get('graphs', '?')}): both sides run eagerly, like for like"))
            continue
        eager = [name for name in GRAPH_PHASES if E.phase(run, name) and not E.phase(run, name).get("graphed")]
        if not eager:
            out.append(RuledOut(rule="eager-phase", hypothesis="a phase runs without CUDA graphs while decode is captured",
                                reason=f"every phase of the {run.get('label')} speculative run is a graph replay, as the decode step is"))
        out += [_eager_finding(ev, run, name, decode, source) for name in eager]
    return out


def _eager_finding(ev, run, name, decode, source) -> Finding:
    rec, n_cycles = E.phase(run, name), E.cycles(run)
    steps_per_cycle = rec["count"] / n_cycles if n_cycles else 1.0
    ev_num = {"phase": name, f"{name}_median_ms": rec["median_ms"], "decode_median_ms": decode["median_ms"],
              "decode_graphed": True, f"{name}_graphed": False, "steps_per_cycle": round(steps_per_cycle, 3)}
    expectation = expected_verify_ratio(ev.config) if name == "verify" else None
    if expectation:
        expected_ms = decode["median_ms"] * expectation.ratio
        cost_cycle = max(0.0, rec["median_ms"] - expected_ms) * steps_per_cycle
        ev_num.update(expected_graphed_verify_ms=round(expected_ms, 4), expected_ratio=round(expectation.ratio, 3))
        how = (f"a captured verify should cost about {expectation.ratio:.2f}x the decode step "
               f"({expected_ms:.3f} ms, from the model shape), so running it eagerly costs about {cost_cycle:.3f} ms per cycle")
        # the bytes model holds only for a bandwidth-bound decode step (see expectations)
        confidence = "high" if expectation.applies(decode["median_ms"], int(ev.config.get("tp") or 1)) else "medium"
    else:
        cost_cycle = rec["median_ms"] * steps_per_cycle
        how = f"its eager time, {cost_cycle:.3f} ms per cycle, is the upper bound of what capturing it can save"
        confidence = "medium"
    cost_token = E.per_token_ms(run, cost_cycle * E.cycles(run))
    share = cost_token / run["ms_per_token"] if cost_token is not None and run.get("ms_per_token") else None
    ev_num.update(cost_ms_per_cycle=round(cost_cycle, 4), cost_ms_per_token=_r(cost_token), share_of_ms_per_token=_r(share))
    return Finding(
        rule="eager-phase", severity=severity_for_share(share), confidence=confidence,
        title=f"{name} runs without CUDA graphs while the baseline decode step is captured",
        detail=(f"In the {run.get('label')} speculative run the {name} phase ran eagerly ({rec['median_ms']:.3f} ms median) "
                f"while the decode step it is compared with ({source}) is a graph replay ({decode['median_ms']:.3f} ms). "
                f"{how.capitalize()}. NCCL settings cannot close this gap: it is host launch overhead, not the collectives."),
        evidence=ev_num, cost_ms_per_token=cost_token,
        next_command=engine_command(ev.config, graphs="all", trace_out="trace-graphs-all.json"))


def verify_ratio(ev: E.Evidence) -> list:
    """The verify/decode ratio against what k+1 tokens through the same weights should cost."""
    expectation = expected_verify_ratio(ev.config)
    out = []
    for _, run in _spec_runs(ev):
        verify = E.phase(run, "verify")
        decode, source = E.baseline_decode(ev, run.get("label"))
        if expectation is None or verify is None or decode is None:
            out.append(NotChecked(rule="verify-ratio", hypothesis="verify costs more than its extra tokens explain",
                                  missing="the trace lacks the model shape, a verify phase or a baseline decode step"))
            continue
        measured = run.get("verify_decode_ratio") or verify["median_ms"] / decode["median_ms"]
        nums = {"verify_median_ms": verify["median_ms"], "decode_median_ms": decode["median_ms"],
                "measured_ratio": round(measured, 3), **expectation.to_json()}
        if measured <= expectation.limit:
            out.append(RuledOut(rule="verify-ratio", hypothesis="verify costs more than its extra tokens explain",
                                reason=f"verify/decode = {measured:.2f}, within the {expectation.limit:.2f} that "
                                       f"k+1 = {int(ev.config.get('k') or 1) + 1} tokens explain (expected {expectation.ratio:.2f})"))
            continue
        out.append(_ratio_finding(ev, run, verify, decode, measured, expectation, nums))
    return out


def _ratio_finding(ev, run, verify, decode, measured, expectation, nums) -> Finding:
    tp = int(ev.config.get("tp") or 1)
    gbps = expectation.decode_gbps(decode["median_ms"], tp)
    nums["decode_weight_gbps_per_rank"] = round(gbps, 3)
    if not expectation.applies(decode["median_ms"], tp):
        return Finding(
            rule="verify-ratio", severity="info", confidence="low",
            title=f"verify costs {measured:.2f}x the decode step; the bytes model does not apply to this run",
            detail=(f"The decode step moves its weights at {gbps:.3g} GB/s per rank, far below any memory bandwidth: "
                    f"it is bound by per-step overheads (launches, Python, collective latency), not by weight bytes, "
                    f"so the {expectation.ratio:.2f}x expected from the model shape does not predict its verify step. "
                    f"On a GPU with a real model the comparison is meaningful."),
            evidence=nums)
    mismatch = decode.get("graphed") and not verify.get("graphed")
    excess_cycle = (measured - expectation.ratio) * decode["median_ms"]
    cost_token = E.per_token_ms(run, excess_cycle * E.cycles(run))
    share = cost_token / run["ms_per_token"] if cost_token is not None and run.get("ms_per_token") else None
    why = ("The verify step is eager and the decode step captured (see eager-phase), which explains it."
           if mismatch else "Both run the same way (graphs), so the excess is in the verify path itself: "
                            "its attention/mask handling at k+1 query rows, or a shape that falls off the captured sizes.")
    return Finding(
        rule="verify-ratio", severity="warning" if mismatch else severity_for_share(share), confidence="high",
        title=f"verify costs {measured:.2f}x the decode step; k+1 tokens explain about {expectation.ratio:.2f}x",
        detail=(f"A decode step is bound by weight bandwidth, so a verify step over the same weights should cost "
                f"the bytes ratio, {expectation.ratio:.2f}x (allowance up to {expectation.limit:.2f}x); measured "
                f"{verify['median_ms']:.3f} ms against {decode['median_ms']:.3f} ms = {measured:.2f}x. {why}"),
        evidence={**nums, "excess_ms_per_cycle": round(excess_cycle, 4), "cost_ms_per_token": _r(cost_token)},
        cost_ms_per_token=cost_token,
        next_command=engine_command(ev.config, graphs="all", trace_out="trace-graphs-all.json"))


def speculative_slower(ev: E.Evidence) -> list:
    """Speculative slower than its baseline: decompose its time per token into draft, verify and
    overhead, and say what acceptance would break even."""
    out = []
    for _, run in _spec_runs(ev):
        base = E.find_run(ev.runs, mode="baseline", label=run.get("label")) or \
            E.find_run((ev.baseline or {}).get("runs") or [], mode="baseline")
        if not base or not base.get("tokens_per_s") or not run.get("tokens_per_s"):
            out.append(NotChecked(rule="speculative-slower", hypothesis="speculative slower than the baseline",
                                  missing="no baseline run with tokens/s to compare with"))
            continue
        speedup = run["tokens_per_s"] / base["tokens_per_s"]
        if speedup >= 1.0:
            out.append(RuledOut(rule="speculative-slower", hypothesis="speculative slower than the baseline",
                                reason=f"{run.get('label')}: speculative {run['tokens_per_s']:.1f} tok/s >= baseline "
                                       f"{base['tokens_per_s']:.1f} tok/s ({speedup:.2f}x)"))
            continue
        out.append(_slower_finding(ev, run, base, noise=speedup >= 1.0 - SLOWER_NOISE))
    return out


def _slower_finding(ev, run, base, noise: bool) -> Finding:
    parts = {name: E.per_token_ms(run, (E.phase(run, name) or {}).get("total_ms", 0.0)) or 0.0
             for name in ("draft", "verify", *E.OVERHEAD_PHASES)}
    overhead = sum(parts[name] for name in E.OVERHEAD_PHASES)
    unaccounted = max(0.0, run["ms_per_token"] - parts["draft"] - parts["verify"] - overhead)
    cycle_ms = sum(E.per_cycle_ms(run, name) or 0.0 for name in ("draft", "verify", *E.OVERHEAD_PHASES))
    decode_ms = base["ms_per_token"]
    tpc = E.tokens_per_cycle(run)
    breakeven = cycle_ms / decode_ms if decode_ms else None   # tokens a cycle must yield to match the baseline
    nums = {"speculative_tokens_per_s": _r(run["tokens_per_s"]), "baseline_tokens_per_s": _r(base["tokens_per_s"]),
            "speculative_ms_per_token": _r(run["ms_per_token"]), "baseline_ms_per_token": _r(decode_ms),
            "draft_ms_per_token": _r(parts["draft"]), "verify_ms_per_token": _r(parts["verify"]),
            "overhead_ms_per_token": _r(overhead + unaccounted), "cycle_ms": _r(cycle_ms),
            "tokens_per_cycle": _r(tpc), "breakeven_tokens_per_cycle": _r(breakeven)}
    biggest = max(("draft", "verify", "overhead"),
                  key=lambda k: {"draft": parts["draft"], "verify": parts["verify"], "overhead": overhead + unaccounted}[k])
    fix = _faster_spec_command(ev, run, base, tpc, breakeven)
    return Finding(
        rule="speculative-slower", severity="info" if noise else "warning", confidence="low" if noise else "high",
        title=(f"speculative {run['tokens_per_s']:.1f} tok/s is " + ("no faster than (within timing noise)" if noise else
               "slower than") + f" the baseline's {base['tokens_per_s']:.1f} tok/s"),
        detail=(f"Per generated token: draft {parts['draft']:.3f} ms + verify {parts['verify']:.3f} ms + overhead "
                f"(accept, draft extend, host, unaccounted) {overhead + unaccounted:.3f} ms = {run['ms_per_token']:.3f} ms, "
                f"against {decode_ms:.3f} ms per token for the baseline. A cycle costs {cycle_ms:.3f} ms, so it must yield "
                f"{breakeven:.2f} tokens to break even; it yields {tpc if tpc is not None else float('nan'):.2f}. "
                f"The largest share is {biggest}."),
        evidence=nums, cost_ms_per_token=run["ms_per_token"] - decode_ms, next_command=fix)


def _faster_spec_command(ev, run, base, tpc, breakeven) -> str:
    """Graphs first when verify is eager against a captured decode; else a better draft when the
    cycle yields fewer tokens than break-even; else the loss is outside the cycle (prefill, host):
    capture everything on a GPU, or amortise it over a longer run on CPU."""
    verify, decode = E.phase(run, "verify") or {}, E.phase(base, "decode") or {}
    if decode.get("graphed") and not verify.get("graphed"):
        return engine_command(ev.config, graphs="all", trace_out="trace-graphs-all.json")
    if tpc is not None and breakeven is not None and tpc < breakeven:
        return (f"ncclprobe train-draft --preset {ev.config.get('preset')}  # then run-engine --draft PATH: "
                f"the cycle yields {tpc:.2f} tokens, break-even needs {breakeven:.2f}")
    if ev.config.get("device") == "cuda":
        return engine_command(ev.config, graphs="all", trace_out="trace-graphs-all.json")
    longer = 4 * int(ev.config.get("new_tokens") or 32)
    return (engine_command(ev.config, new_tokens=longer, trace_out="trace-longer.json") +
            "  # the cycle beats break-even: the loss is prefill and host time, which a longer run amortises")


def collective_share(ev: E.Evidence) -> list:
    """How much of the step the collectives take: the ceiling on what any NCCL setting can win.
    One verdict for the whole trace, with every run's share as evidence."""
    shares = {E.run_name(src, run): (run["collective_share"], run) for src, run in ev.all_runs()
              if run.get("collective_share") is not None}
    if not shares:
        return [NotChecked(rule="collective-share", hypothesis="collectives dominate the step",
                           missing="the trace has no measured collective share")]
    bound = {name: pair for name, pair in shares.items() if pair[0] >= COLLECTIVE_BOUND_SHARE}
    if bound:
        return [_bound_finding(ev, bound)]
    if all(share < COLLECTIVE_MINOR_SHARE for share, _ in shares.values()):
        worst = max(shares, key=lambda name: shares[name][0])
        share, run = shares[worst]
        return [RuledOut(rule="collective-share", hypothesis="NCCL settings as the main lever",
                         reason=f"collectives take at most {share:.0%} of the step time ({worst}): no NCCL setting can "
                                f"win more than {share * (run.get('ms_per_token') or 0):.3f} ms of its "
                                f"{run.get('ms_per_token') or 0:.3f} ms per token")]
    return []


def _bound_finding(ev, bound: dict) -> Finding:
    worst = max(bound, key=lambda name: bound[name][0])
    share, run = bound[worst]
    sizes = _all_sizes(ev)
    coll = run.get("collectives") or {}
    return Finding(
        rule="collective-bound", severity="warning", confidence="high",
        title=f"collectives take {share:.0%} of the step time ({worst}"
              + (f", and {len(bound) - 1} more run(s) at 50% or more)" if len(bound) > 1 else ")"),
        detail=(f"{coll.get('per_token_count', 0):.1f} collectives and {coll.get('per_token_bytes', 0):.0f} bytes per token "
                f"take {share:.0%} of the step: here the collective path (NCCL settings, fewer or larger collectives, "
                f"a replicated draft) is the lever. Measure the engine's own sizes and compare settings."),
        evidence={"collective_share_by_run": {name: round(pair[0], 3) for name, pair in bound.items()},
                  "per_token_count": coll.get("per_token_count"), "per_token_bytes": coll.get("per_token_bytes"),
                  "ms_per_token": run.get("ms_per_token"), "sizes_bytes": sizes},
        cost_ms_per_token=share * (run.get("ms_per_token") or 0.0),
        next_command=f"ncclprobe sweep --nranks {ev.config.get('tp', 2)} --sizes {sizes_arg(sizes) or '8K..1M'} --output sweep.jsonl")


def collectives_vs_sweep(ev: E.Evidence) -> list:
    """The engine's collectives against the sweep's time for the same sizes, settings and mode."""
    hyp = "engine collectives cost more than the sweep measured"
    if not _all_sizes(ev):
        return [RuledOut(rule="collectives-vs-sweep", hypothesis=hyp,
                         reason=f"the engine issued no collectives (tp={ev.config.get('tp')})")]
    if not ev.sweep:
        return [NotChecked(rule="collectives-vs-sweep", hypothesis=hyp, missing="no --sweep results",
                           next_command=f"ncclprobe sweep --nranks {ev.config.get('tp')} --sizes {sizes_arg(_all_sizes(ev))} --output sweep.jsonl")]
    from ncclprobe.diagnose.sweep_match import compare_run
    out = []
    for source, run in ev.all_runs():
        out.append(compare_run(ev, run, E.run_name(source, run), hyp, SWEEP_EXCESS))
    return out


def graph_coverage(ev: E.Evidence) -> list:
    """With graphs requested, the share of step time spent in graph replays: what is left eager
    pays the host launch path (about 18 us per torch.distributed call on the H200, before kernels)."""
    if ev.config.get("graphs") in (None, "none"):
        return []
    out = []
    for _, run in _runs_with(ev, "graph_coverage"):
        coverage = run["graph_coverage"]
        hyp = f"{run.get('label')} {run.get('mode')}: steps fall off the captured graphs"
        if coverage >= GRAPH_COVERAGE_OK:
            out.append(RuledOut(rule="graph-coverage", hypothesis=hyp, reason=f"{coverage:.0%} of step time is graph replay"))
            continue
        eager = [n for n in E.PHASES if E.phase(run, n) and not E.phase(run, n).get("graphed")]
        capturable_eager = [n for n in eager if n not in NEVER_CAPTURED]
        detail = ("Steps outside the captured graphs run eagerly: a batch size or token count outside the capture "
                  "list, or a phase the graph mode leaves out.")
        if not capturable_eager:   # the rest is prefill (once per run), accept and host: no graph mode captures them
            detail = ("Every capturable phase is a graph replay; the rest is the prefill (once per run, so a short run "
                      "weighs it more), acceptance and host time, which no graph mode captures.")
        out.append(Finding(
            rule="graph-coverage", severity="warning" if capturable_eager else "info",
            confidence="medium" if capturable_eager else "high",
            title=f"{run.get('label')} {run.get('mode')}: only {coverage:.0%} of step time is graph replay (--graphs {ev.config.get('graphs')})",
            detail=detail, evidence={"graph_coverage": coverage, "graphs": ev.config.get("graphs"), "eager_phases": eager},
            next_command=engine_command(ev.config, graphs="all", trace_out="trace-graphs-all.json") if capturable_eager else ""))
    return out


def draft_positions(ev: E.Evidence) -> list:
    """The run goes past the positions the draft was trained on (`train-draft` records them, the
    trace's config carries them): there the draft predicts what it never learnt, and acceptance
    falls. Measured on the H200: a draft trained below 64 positions accepted 4.00 tokens per cycle
    in a 64-token run and 2.50 over 256 tokens (docs/LOG.md)."""
    specs = _spec_runs(ev)
    if not specs or not ev.config.get("draft"):
        return []
    hyp = "the run goes past the positions the draft was trained on"
    trained = ev.config.get("draft_trained_positions")
    reach = (ev.config.get("prompt_len") or 0) + (ev.config.get("new_tokens") or 0)
    if trained is None:
        return [NotChecked(rule="draft-positions", hypothesis=hyp,
                           missing="the trace does not record the draft's trained positions (a draft file without "
                                   "train-draft's metadata, or a trace from before they were recorded)")]
    if reach <= trained:
        return [RuledOut(rule="draft-positions", hypothesis=hyp,
                         reason=f"the run reaches position {reach}, within the {trained} the draft was trained on")]
    acceptance = {E.run_name(src, run): (run.get("acceptance") or {}).get("mean_length") for src, run in specs}
    source = f"--checkpoint {ev.config['checkpoint']}" if ev.config.get("checkpoint") else \
        f"--preset {ev.config.get('preset')}"
    return [Finding(
        rule="draft-positions", severity="warning", confidence="medium",
        title=f"the run reaches position {reach}, but the draft was trained on positions below {trained}",
        detail=(f"{reach - trained} of the run's {reach} positions are beyond anything the draft saw in training, where "
                f"it predicts what it never learnt and the acceptance falls (on the H200 one such draft accepted 4.00 "
                f"tokens per cycle inside its positions and 2.50 over a run four times longer). Acceptance here: "
                + ", ".join(f"{name} {value:.2f}" for name, value in acceptance.items() if value is not None)
                + ". Train the draft on sequences as long as the runs it serves."),
        evidence={"draft_trained_positions": trained, "run_positions": reach,
                  "mean_acceptance_length": acceptance},
        next_command=f"ncclprobe train-draft {source} --gen-len {reach} --out draft-{reach}.safetensors")]


def _all_sizes(ev: E.Evidence) -> list[int]:
    return sorted({size for _, run in ev.all_runs() for size in engine_sizes(run)})


def _runs_with(ev: E.Evidence, key: str):
    return [(src, run) for src, run in ev.all_runs() if src == "trace" and run.get(key) is not None]


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


RULES = (eager_phase, verify_ratio, speculative_slower, collective_share, collectives_vs_sweep, graph_coverage,
         draft_positions)
