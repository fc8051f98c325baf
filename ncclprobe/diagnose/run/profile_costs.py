"""What a profile's steps cost in the user's units: per step, per generated token and as a share
of the run's profiled time, so that a severity follows what a cause could win and the costs of
one run add up (docs/METRICS.md "Profiles", "costs").

- **Tokens**: what each sequence kept over the profiled steps (`EngineRun.new_tokens`: the
  target's KV cache growth with recorded shapes, one per decode and prefill step; steps of another
  kind, a draft's or the host's, keep none); a server log's acceptance fills in a verify's. A
  verify whose kept tokens the trace does not hold makes the run's tokens unknown: a forward is
  never counted as a token (a verify keeps 1 to k+1), so no cost is given per token then, only per
  step or per cycle.
- **Profiler inflation**: recording every host op slows the host's part of a step, 0.77-2.30x on
  the H200 HF fixtures (docs/LOG.md 2026-12-01), so a cost made of host time (GPU idle, glue)
  is a `profiled` Cost whose unprofiled value lies between it / PROFILER_INFLATION and it.
- **Run time**: the steps' profiled time, per phase its median step times its steps (`phase_ms`:
  one stalled step does not decide a cost; `EngineRun.wall_s` keeps the sum). Profiled, not the
  user's: recording
  every host op slows a host-bound eager run (docs/LOG.md 2026-12-01: 1.0-2.1x per token on the
  H200 fixtures), so a cost that is host time is an upper bound of the unprofiled one, and the
  share of the run is the figure that carries over.
- **Reference**: the graph-replayed phase an eager phase is weighed against: the baseline's of
  the same kind, else its decode, else its most frequent graphed phase, else a graphed phase of
  this run (never the phase itself).
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.view import EngineRun, Phase

TARGET_KINDS = ("prefill", "decode", "verify")
PROFILER_INFLATION = 2.3  # the largest host-time inflation measured on the H200 fixtures (above)


def profile_runs(ev: Evidence) -> list:
    """The runs the step rules weigh: the profiles of the run under diagnosis (not its baseline's,
    which are the references)."""
    return [run for src, run in ev.all_runs() if run.source == "profile" and src == "trace"]


@dataclass(frozen=True)
class Tokens:
    count: float | None  # None: not known (why says why)
    exact: bool  # True whenever count is known: a forward is never counted as a token
    source: str
    why: str = ""  # why the count is unknown


UNKNOWN_VERIFY = (
    "the tokens each verify kept are not in the trace: no recorded shapes show the KV cache's "
    "growth and no server log its acceptance, and a verify keeps 1 to k+1 tokens"
)


def tokens(run: EngineRun) -> Tokens:
    """The tokens per sequence the run's profiled steps produced (see the module docstring)."""
    if run.new_tokens:
        return Tokens(float(run.new_tokens), True, "kept: the KV cache's growth, one per decode")
    known = 0.0
    tpc = run.tokens_per_cycle()
    for phase in run.phases.values():
        if not phase.count:
            continue
        if phase.tokens_kept is not None:
            known += phase.tokens_kept
        elif phase.kind == "verify" and tpc:
            known += phase.count * tpc
        elif phase.kind == "verify":
            return Tokens(None, False, "", UNKNOWN_VERIFY)
        elif phase.kind in TARGET_KINDS:
            known += phase.count  # a decode or a prefill keeps one token per sequence
    if not known:
        return Tokens(None, False, "", "the steps' kinds are unknown")
    return Tokens(known, True, "the server log's acceptance" if tpc else "one token per step")


def phase_ms(phase: Phase) -> float:
    """A phase's typical time: its median step times its steps (one stalled step, a recompilation
    or a page fault, does not decide a cost)."""
    return (phase.median_ms or 0.0) * phase.count if phase.count else 0.0


def forwards_per_token(run: EngineRun, toks: Tokens) -> float | None:
    """Steps (forward passes) the run took per token it kept, its prefill aside."""
    steps = sum(p.count for p in run.phases.values() if p.count and p.kind != "prefill")
    return steps / toks.count if toks.count and steps else None


def run_ms(run: EngineRun) -> float | None:
    """The run's typical profiled time: its phases' (phase_ms); the shares of costs made of medians
    add up to no more than it."""
    total = sum(phase_ms(p) for p in run.phases.values())
    return total or None


def per_token(total_ms: float, toks: Tokens) -> float | None:
    return total_ms / toks.count if toks.count else None


def share(total_ms: float, run: EngineRun) -> float | None:
    whole = run_ms(run)
    return min(1.0, total_ms / whole) if whole else None


def per_token_words(value: float | None, toks: Tokens) -> str:
    if value is None:
        return f"per token unknown ({(toks.why or 'the tokens are unknown').split(':')[0]})"
    return f"about {value:.3f} ms per token"


def cycles(run: EngineRun) -> int:
    """Speculative cycles: one verify per cycle (0: not a speculative run)."""
    return sum(p.count for p in run.phases.values() if p.kind == "verify" and p.count)


def unit_of(run: EngineRun, toks: Tokens, phase: Phase) -> tuple[str, float]:
    """(unit, how many of them the run holds) for a cost of `phase`'s steps: a token where the
    run's tokens are known, else a speculative cycle for a speculative phase, else its step."""
    if toks.count:
        return "token", toks.count
    if phase.kind in ("verify", "draft") and cycles(run):
        return "cycle", float(cycles(run))
    return "step", float(phase.count)


def baseline_reference(ev: Evidence, kind: str) -> tuple[EngineRun, Phase] | None:
    """(baseline run, its graphed phase) to weigh a `kind` step against: the same kind, else its
    decode, else its most frequent graphed phase of any kind but prefill (a compiled, replayed
    decode may record no shapes, so its kind may be unknown)."""
    for base in ev.baseline:
        same = base.first_of_kind(kind) or base.first_of_kind("decode")
        if same and same.graphed:
            return base, same
        graphed = [p for p in base.phases.values() if p.graphed and p.count and p.kind != "prefill"]
        if graphed:
            return base, max(graphed, key=lambda p: p.count)
    return None


def graphed_reference(ev: Evidence, run: EngineRun, phase: Phase) -> tuple[Phase | None, str, bool]:
    """(reference phase, where it is said to come from, from the baseline?) or (None, "", False)."""
    reference = baseline_reference(ev, phase.kind)
    if reference is not None:
        base, same = reference
        where = (
            f"the baseline ({base.path or 'baseline'}) replays its {same.name} steps from a graph"
        )
        return same, where, True
    others = [p for p in run.phases.values() if p.graphed and p.count and p.name != phase.name]
    if others:
        other = max(others, key=lambda p: p.count)
        return other, f"this run replays its {other.name} steps from a graph", False
    return None, "", False
