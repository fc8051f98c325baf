"""How a profile's causes add up against its baseline profile, one pure function each: the
difference in profiled time per token split into parts that add up to it, and speculation's own
part (the forwards it runs per token).

The split (docs/METRICS.md "Profiles", "against a baseline"), per token of each run:
- **eager steps**: what capture would save in this run (`rules_profile_eager.eager_parts`: each
  eager step's GPU idle above its replayed reference's);
- **the forwards at their replayed price**: every step but the prefill at its median time minus
  that saving, against the baseline's steps: the GPU work and host residual of the forwards
  themselves. For a speculative run this is speculation's part: drafts and verifies beyond one
  forward per token cost it, verifies that kept several tokens save it;
- **the prefill**: once per run, over each run's tokens.
The three add up to the difference by construction; what they cannot tell is said: a verify's
kept tokens unknown (no shapes, no server log) leave the per-token figures unknown (not checked).
The difference is the run's time ledger's pool (`ledger.WHOLE`): the causes' costs never add past it.
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import profile_command
from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.diagnose.run.ledger import WHOLE
from ncclprobe.diagnose.run.rules_profile_eager import eager_parts
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import Cost, Finding, NotChecked, Outcome, RuledOut, severity_for_share


def against_baseline(ev: E.Evidence) -> list:
    """Both runs' profiled time per token and the parts of their difference (module docstring)."""
    runs = C.profile_runs(ev)
    bases = [b for b in ev.baseline if b.source == "profile"]
    if not runs or not bases:
        return []
    run, base = runs[0], bases[0]
    mine, theirs = C.tokens(run), C.tokens(base)
    if not (mine.count and theirs.count and C.run_ms(run) and C.run_ms(base)):
        why = "; ".join(sorted({t.why for t in (mine, theirs) if not t.count and t.why}))
        return [
            NotChecked(
                rule="against-baseline",
                hypothesis="the causes explain the difference from the baseline",
                missing=f"the tokens of both runs ({why or 'their steps are of unknown kind'})",
                next_command=profile_command(
                    run.engine if run.engine not in ("unknown", "torch") else None
                ),
            )
        ]
    parts = split(ev, run, mine.count, base, theirs.count)
    exact = mine.exact and theirs.exact
    bound = ""
    evidence = {
        **{k: round(v, 4) for k, v in parts.items() if isinstance(v, float)},
        "eager_ms_per_token_by_phase": {k: round(v, 4) for k, v in parts["by_phase"].items()},
        "tokens": mine.count,
        "baseline_tokens": theirs.count,
        "tokens_exact": exact,
    }
    return _speculation(ev, run, mine, base, theirs, parts) + [
        Finding(
            rule="against-baseline",
            severity="info",
            confidence="medium" if exact else "low",
            title=(
                f"{bound}{parts['ms_per_token']:.3f} ms per token against the baseline's "
                f"{parts['baseline_ms_per_token']:.3f} (both profiled): of the "
                f"{parts['difference_ms_per_token']:+.3f} ms the eager steps are {parts['eager_ms_per_token']:+.3f}, "
                f"the forwards at their replayed price {parts['forwards_ms_per_token']:+.3f}, the prefill "
                f"{parts['prefill_ms_per_token']:+.3f}"
            ),
            detail=(
                f"Per token: this run's {C.run_ms(run):.1f} ms of steps over {mine.count:.1f} tokens "
                f"({mine.source}), the baseline's {C.run_ms(base):.1f} ms over {theirs.count:.1f} ({theirs.source}); "
                "each phase at its median step. The eager steps are what capture would save here; the "
                "forwards at their replayed price are every other step's time against the baseline's "
                "(drafts and rejected verifies cost it, verifies that kept several tokens save it); the "
                "prefill is once per run. They add up to the difference. All are profiled times: the "
                "profiler's own host cost inflates an eager run more than a replayed one (1.0-2.2x per "
                "token on the H200 fixtures, docs/LOG.md), so the unprofiled difference is smaller; each "
                "part's share of its run carries over."
            ),
            evidence=evidence,
            cost=_difference_cost(run, mine, parts),
        )
    ]


def _difference_cost(run: EngineRun, mine: C.Tokens, parts: dict) -> Cost | None:
    """The run's difference from its baseline per token, both profiled: the pool of the run's
    time ledger (the causes' costs never add past it); None where the run is not slower."""
    difference = parts["difference_ms_per_token"]
    if difference <= 0:
        return None
    return Cost.profiled(
        difference,
        "token",
        "this run's profiled time per token minus the baseline's",
        inflation=C.PROFILER_INFLATION,
        run=run.name("trace"),
        covers=WHOLE,
        total_ms=difference * mine.count,
    )


def split(
    ev: E.Evidence, run: EngineRun, tokens: float, base: EngineRun, base_tokens: float
) -> dict:
    """The parts of the difference per token (module docstring), each run's time over its known
    `tokens`; they add up to it."""
    saving = {p["phase"].name: p["cost"] for p in eager_parts(ev, run)[0]}
    eager = {name: saving[name] * (run.phases[name].count or 0) / tokens for name in saving}
    steady = sum(
        (C.phase_ms(p) - saving.get(p.name, 0.0) * p.count)
        for p in run.phases.values()
        if p.kind != "prefill"
    )
    base_steady = sum(C.phase_ms(p) for p in base.phases.values() if p.kind != "prefill")
    # both runs' times are known where the parts are asked for (against_baseline)
    t_run, t_base = (C.run_ms(run) or 0.0) / tokens, (C.run_ms(base) or 0.0) / base_tokens
    return {
        "ms_per_token": t_run,
        "baseline_ms_per_token": t_base,
        "difference_ms_per_token": t_run - t_base,
        "eager_ms_per_token": float(sum(eager.values())),
        "forwards_ms_per_token": steady / tokens - base_steady / base_tokens,
        "prefill_ms_per_token": _prefill(run) / tokens - _prefill(base) / base_tokens,
        "by_phase": eager,
    }


def _prefill(run: EngineRun) -> float:
    return sum(C.phase_ms(p) for p in run.phases.values() if p.kind == "prefill")


def _speculation(
    ev: E.Evidence, run: EngineRun, mine: C.Tokens, base: EngineRun, theirs: C.Tokens, parts: dict
) -> list[Outcome]:
    """Speculation's own cost: its forwards per token at their replayed price against the
    baseline's; a saving is ruled out as a cause. Unknown without the tokens each verify kept."""
    if run.mode != "speculative":
        return []
    here, there = C.forwards_per_token(run, mine), C.forwards_per_token(base, theirs)
    hyp = "speculation costs more per token than the forwards it saves"
    if not (mine.exact and theirs.exact) or here is None or there is None:
        return [
            NotChecked(
                rule="speculation-forwards",
                hypothesis=hyp,
                missing="the tokens each verify kept: the KV cache's growth (record with "
                "record_shapes=True) or the server log's acceptance (--server-log)",
                next_command=profile_command(
                    run.engine if run.engine not in ("unknown", "torch") else None
                ),
            )
        ]
    cost = parts["forwards_ms_per_token"]
    if cost <= 0:
        return [
            RuledOut(
                rule="speculation-forwards",
                hypothesis=hyp,
                reason=f"{here:.2f} forwards per token against the baseline's {there:.2f}: at their replayed "
                + (
                    f"price speculation saves {-cost:.3f} ms per token"
                    if cost < 0
                    else "price speculation costs nothing per token"
                ),
            )
        ]
    share = C.share(cost * mine.count, run)
    return [
        Finding(
            rule="speculation-forwards",
            severity=severity_for_share(share),
            confidence="medium",
            title=(
                f"speculation runs {here:.2f} forwards per token against the baseline's {there:.2f}: "
                f"{cost:.3f} ms per token at their replayed price, {share or 0.0:.0%} of the run"
            ),
            detail=(
                f"Measured: {sum(p.count for p in run.phases.values() if p.kind != 'prefill')} forwards (drafts "
                f"and verifies) for {mine.count:g} tokens ({mine.source}); the baseline "
                f"{there:.2f} per token. A verify keeps its accepted drafts and one token of its own, so the "
                "forwards beyond one per token are drafts and verifies the target rejected. Their time, "
                "with what capture would save taken off, against the baseline's steps is this cost; a "
                "draft that agrees with its target more often, or fewer drafts per cycle, is the lever, "
                "not NCCL."
            ),
            evidence={
                "forwards_per_token": round(here, 3),
                "baseline_forwards_per_token": round(there, 3),
                "tokens": mine.count,
                "share_of_run_time": None if share is None else round(share, 4),
            },
            cost=Cost.profiled(
                cost,
                "token",
                "the forwards beyond the baseline's per token, at their replayed price (profiled)",
                inflation=C.PROFILER_INFLATION,
                run=run.name("trace"),
                covers=("forwards",),
                total_ms=cost * mine.count,
            ),
        )
    ]


RULES = (against_baseline,)
