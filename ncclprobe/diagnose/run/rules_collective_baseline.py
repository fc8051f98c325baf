"""Each collective against the baseline's same collective: per call, at the same operation, size
and library, the one noise rule (`ncclprobe.stats.compare`) on the two runs' per-call times.

Where the ranks' calls are matched (`evidence.run.profile.align`), a call's time is its transfer:
from the last rank's arrival to the last end, the wait for a late rank split out; otherwise each
kernel's (or host op's) time, which includes that wait, and the words say so. A call slower beyond
the noise at the same operation and size is the library's configuration or its transport: for NCCL
its settings (protocol, algorithm, channels) or the path it connected over, which each run's NCCL
log tells apart (what it chose per call, the transport of each connection) and `env-check` of both
jobs shows (the NCCL_* variables each process had). The lever is named only where NCCL ran.
"""

from __future__ import annotations

import dataclasses
import statistics

from ncclprobe import stats
from ncclprobe.diagnose.run.ledger import COLLECTIVE, TRANSFER
from ncclprobe.diagnose.run.levers import LEVERS
from ncclprobe.diagnose.run.profile_costs import run_ms
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.profile.comm_names import NCCL_LIBRARIES
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import Cost, Finding, RuledOut, severity_for_share
from ncclprobe.nccl.recipes import proof_env, user_log_env
from ncclprobe.sizes import format_size

MIN_CALLS = 3  # per side: fewer calls give the noise rule no spread to judge by


def per_call_times(run: EngineRun) -> tuple[dict[tuple, list[float]], bool]:
    """({(op, size, library): [µs per call]}, whether the wait for other ranks is split out)."""
    al = run.alignment
    library = _library(run)
    if al is not None and al.calls:
        out: dict[tuple, list[float]] = {}
        for call in al.calls:
            out.setdefault((call.op, call.size_bytes, library), []).append(call.moved)
        return out, True
    out = {}
    for c in run.collectives:
        if c.calls_us:
            out.setdefault((c.op, c.size_bytes, c.library), []).extend(c.calls_us)
    return out, False


def _library(run: EngineRun) -> str | None:
    libs = {c.library for c in run.collectives if c.library}
    return next(iter(libs)) if len(libs) == 1 else None


def against_baseline_calls(ev: E.Evidence) -> list:
    """Every collective of the run under diagnosis against the baseline's at the same operation,
    size and library (module docstring)."""
    runs = [(src, run) for src, run in ev.all_runs() if src == "trace" and run.source == "profile"]
    bases = [run for src, run in ev.all_runs() if src != "trace" and run.source == "profile"]
    if not runs or not bases:
        return []
    (src, run), base = runs[0], bases[0]
    mine, split_here = per_call_times(run)
    theirs, split_there = per_call_times(base)
    split = split_here and split_there
    if split_here != split_there:  # compare like with like: kernel times on both sides
        mine, _ = per_call_times(_unaligned(run))
        theirs, _ = per_call_times(_unaligned(base))
    out: list[Finding | RuledOut] = []
    for key in sorted(set(mine) & set(theirs), key=str):
        op, size, library = key
        a, b = mine[key], theirs[key]
        if size is None or len(a) < MIN_CALLS or len(b) < MIN_CALLS:
            continue
        verdict = stats.compare(stats.Sample.of_times(a), stats.Sample.of_times(b))
        what = f"{op} of {format_size(size)}" + (f" ({library})" if library else "")
        hyp = f"{what}: the calls are slower than the baseline's at the same size"
        figures = (
            f"{_time(statistics.median(a))} per call against the baseline's "
            f"{_time(statistics.median(b))} (medians of {len(a)} and {len(b)} calls, "
            + ("the transfer after the last rank arrived" if split else "each call's whole time")
            + ")"
        )
        if verdict.verdict != stats.SLOWER:
            out.append(
                RuledOut(
                    rule="collective-vs-baseline",
                    hypothesis=hyp,
                    reason=f"{figures}: {verdict.verdict} ({verdict.describe()})",
                )
            )
            continue
        out.append(_slower(ev, src, run, key, a, b, verdict, split, figures, what))
    return out


def _time(us: float) -> str:
    """A call's time as read: µs below a millisecond, else ms to three significant digits."""
    return f"{us:.1f} us" if us < 1000 else f"{us / 1000:.3g} ms"


def _unaligned(run: EngineRun) -> EngineRun:
    return dataclasses.replace(run, alignment=None)


def _slower(
    ev: E.Evidence,
    src: str,
    run: EngineRun,
    key: tuple,
    a: list[float],
    b: list[float],
    verdict: stats.Comparison,
    split: bool,
    figures: str,
    what: str,
) -> Finding:
    op, size, library = key
    per_call_ms = (statistics.median(a) - statistics.median(b)) / 1000.0
    calls = len(a)
    whole = run_ms(run)
    share = per_call_ms * calls / whole if whole else None
    nccl = library in NCCL_LIBRARIES
    proof = "NCCL_DEBUG={NCCL_DEBUG} with NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS}".format(
        **proof_env()
    )
    cause = (
        "At the same operation and size, a slower call is NCCL's configuration (the protocol, "
        "algorithm or channels it chose: NCCL_PROTO, NCCL_ALGO, NCCL_MIN/MAX_NCHANNELS, buffer "
        "sizes) or its transport (the path it connected the ranks over: NVLink, PCIe P2P, SHM, "
        "the network). Which one, each run's NCCL log tells "
        f"({proof}: what it read, what it chose per call, the transport of "
        "each connection); `ncclprobe env-check` of both jobs shows the NCCL_* variables each "
        "process had."
        if nccl
        else f"At the same operation and size, a slower call is the configuration or the "
        f"transport of what moved the data ({library or 'not recorded'}): "
        + (LEVERS.get(library or "", "no lever on it is known to ncclprobe"))
        + "; NCCL settings do not act on it."
    )
    wait = (
        "The wait for other ranks is split out: these are the transfer times after the last rank "
        "arrived."
        if split
        else "The wait for other ranks is not split out (the ranks' calls are not matched in both "
        "runs): a late rank slows these calls too; profiles of every rank in both runs split it."
    )
    env = " ".join(f"{k}={v}" for k, v in user_log_env("/tmp/nccl-logs").items())
    return Finding(
        rule="collective-vs-baseline",
        severity=severity_for_share(share),
        confidence="high" if split else "medium",
        title=(
            f"{what}: {_time(statistics.median(a))} per call against the baseline's "
            f"{_time(statistics.median(b))} ({statistics.median(a) / statistics.median(b):.1f}x), "
            "beyond the noise"
        ),
        detail=f"{figures}; slower {verdict.describe()}. {wait} {cause}",
        evidence={
            "op": op,
            "size_bytes": size,
            "library": library,
            "us_per_call": round(statistics.median(a), 3),
            "baseline_us_per_call": round(statistics.median(b), 3),
            "calls": calls,
            "baseline_calls": len(b),
            "wait_split_out": split,
            "noise_rule": verdict.to_json(),
        },
        cost=Cost.measured(
            per_call_ms,
            "call",
            "each call's time above the baseline's at the same operation and size (profiled "
            "kernel times of both runs)",
            run=run.name(src),
            covers=(COLLECTIVE, TRANSFER) if split else (COLLECTIVE,),
            total_ms=per_call_ms * calls,
        ),
        next_command=(
            f"# rerun both jobs with {env}, then read each run's choices per call: "
            "ncclprobe nccl-log /tmp/nccl-logs/<one rank's log>"
            if nccl
            else ""
        ),
    )


RULES = (against_baseline_calls,)
