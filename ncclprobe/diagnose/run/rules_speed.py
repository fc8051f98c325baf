"""Is the speculative run slower than its baseline? The noise rule decides, and a slower run's time
per token is split into draft, verify and overhead, with the acceptance that would break even and
the one command most likely to win it back.

Apart from `rules` because it weighs whole runs' throughputs, not the cost of one phase's steps.
"""

from __future__ import annotations

from ncclprobe import stats
from ncclprobe.diagnose.commands import (
    draft_command,
    draft_note,
    engine_command,
    fresh,
    graphs_command,
)
from ncclprobe.diagnose.run.ledger import WHOLE
from ncclprobe.diagnose.run.run_costs import rounded, spec_runs
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import Cost, Finding, NotChecked, Outcome, RuledOut


def speculative_slower(ev: E.Evidence) -> list:
    """Speculative slower than its baseline: decompose its time per token into draft, verify and
    overhead, and say what acceptance would break even."""
    out: list[Outcome] = []
    for src, run in spec_runs(ev):
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
        out.append(_compare_speeds(ev, src, run, base, run.tokens_per_s / base.tokens_per_s))
    return out


def _compare_speeds(
    ev: E.Evidence, src: str, run: EngineRun, base: EngineRun, speedup: float
) -> Outcome:
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
    figures = f"speculative {_rate(run)} against baseline {_rate(base)} tok/s ({speedup:.2f}x)"
    if verdict.verdict == stats.FASTER:
        return RuledOut(
            rule="speculative-slower",
            hypothesis=hyp,
            reason=f"{run.label}: speculative is faster beyond the noise: {figures}; {verdict.describe()}",
        )
    if verdict.verdict == stats.SLOWER:
        return _slower_finding(ev, src, run, base, verdict)
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


def _speed_sample(run: EngineRun) -> stats.Sample:
    """A run's tokens/s as the noise rule's sample: its repeats, else its one measurement."""
    return stats.Sample.of_rates(run.tokens_per_s_repeats or [run.tokens_per_s])


def _rate(run: EngineRun) -> str:
    spread = run.speed_range()
    return f"{run.tokens_per_s:.1f}" + (
        f" ({spread[0]:.1f}-{spread[1]:.1f} over {len(run.tokens_per_s_repeats)} repeats)"
        if spread
        else ""
    )


def _slower_finding(
    ev: E.Evidence, src: str, run: EngineRun, base: EngineRun, verdict: stats.Comparison
) -> Finding:
    parts = {
        name: run.per_token_ms(phase.total_ms if (phase := run.phase(name)) else 0.0) or 0.0
        for name in ("draft", "verify", *E.OVERHEAD_PHASES)
    }
    overhead = sum(parts[name] for name in E.OVERHEAD_PHASES)
    ms_token = run.ms_per_token or (1000.0 / run.tokens_per_s if run.tokens_per_s else 0.0)
    unaccounted = max(0.0, ms_token - parts["draft"] - parts["verify"] - overhead)
    cycle_ms = sum(
        run.per_cycle_ms(name) or 0.0 for name in ("draft", "verify", *E.OVERHEAD_PHASES)
    )
    decode_ms = base.ms_per_token or (1000.0 / base.tokens_per_s if base.tokens_per_s else 0.0)
    tpc = run.tokens_per_cycle()
    breakeven = (
        cycle_ms / decode_ms if decode_ms and cycle_ms else None
    )  # tokens a cycle must yield to match the baseline
    nums = {
        "speculative_tokens_per_s": rounded(run.tokens_per_s),
        "baseline_tokens_per_s": rounded(base.tokens_per_s),
        "speculative_ms_per_token": rounded(ms_token),
        "baseline_ms_per_token": rounded(decode_ms),
        "draft_ms_per_token": rounded(parts["draft"]),
        "verify_ms_per_token": rounded(parts["verify"]),
        "overhead_ms_per_token": rounded(overhead + unaccounted),
        "cycle_ms": rounded(cycle_ms),
        "tokens_per_cycle": rounded(tpc),
        "breakeven_tokens_per_cycle": rounded(breakeven),
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
        cost=_slowdown(src, run, base, ms_token - decode_ms),
        next_command=fix,
    )


def _slowdown(src: str, run: EngineRun, base: EngineRun, difference: float) -> Cost | None:
    """The measured difference per token, its range from the repeats' spreads where both runs
    have them: the pool of the run's time ledger (its causes never add past it)."""
    mine, theirs = _speed_sample(run), _speed_sample(base)
    if difference <= 0:  # the step timers disagree with the tokens/s the noise rule judged
        difference = 1000.0 * (mine.median - theirs.median)
    if difference <= 0:
        return None
    both = mine.repeats > 1 and theirs.repeats > 1
    low = max(0.0, 1000.0 * (mine.low - theirs.high)) if both else difference
    high = max(low, 1000.0 * (mine.high - theirs.low)) if both else difference
    return Cost.measured(
        min(low, difference),
        "token",
        "the speculative run's time per token minus the baseline's"
        + (" (the range: the repeats' p10-p90 spreads)" if both else ""),
        high=max(high, difference),
        run=run.name(src),
        covers=WHOLE,
        total_ms=difference * run.new_tokens if run.new_tokens else None,
    )


def _faster_spec_command(
    ev: E.Evidence,
    run: EngineRun,
    base: EngineRun,
    tpc: float | None,
    breakeven: float | None,
) -> str:
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


RULES = (speculative_slower,)
