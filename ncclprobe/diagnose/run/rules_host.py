"""The host call behind an idle GPU: which function of the job or the engine the device waited for,
per step, ranked by the idle time it covers (`evidence.run.profile.host`).

On a GPU profile the figure is GPU idle time inside a step while that function ran, and the call
that drained the GPU's queue before it (a `.item()`, a `cudaStreamSynchronize`, a copy to the
host): the cost of a needless sync, an n-gram search on the CPU, a scheduler broadcast or a
tokenisation. On a CPU-only profile the model's own forward runs on the host, so there is no idle
device to measure; the figure is the step's time outside the model's forward, which a GPU would
wait through unless the host ran ahead, and the finding says so. Every time is profiled: a
profiler that records Python calls (with_stack) slows call-heavy Python, so the figure is the
trace's, an upper bound on the same code unprofiled. `host-bound` says how long the GPU idles;
this rule says for what.

The shapes it names, as published: an EAGLE-3 speedup down to 1.00x (humaneval) from a needless
GPU-to-CPU sync in the draft's preprocessing (sgl-project/sglang#26171, fixed by #20266's kind of
change); n-gram speculation roughly 3x slower than plain decoding (vllm-project/vllm#16258), its
lookup a KMP search on the CPU over every n-gram length (vllm-project/vllm#16883; the Numba rewrite
took the cumulative overhead from 54.3 s to 1.9 s, vllm-project/vllm#13365). None publishes a
trace: the profiles recorded here (tests/fixtures/profiles/host/, examples/capture/) stand in.
"""

from __future__ import annotations

from typing import Any

from ncclprobe.diagnose.commands import profile_command
from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.profile.host import HostReport
from ncclprobe.findings import Cost, Finding, NotChecked, RuledOut, severity_for_share

RULE = "host-call"
HYPOTHESIS = "the device waits for a host function in every step"
MIN_SHARE = 0.05  # a function covering less of the step than this is not named
MIN_STEPS = 2  # ... nor one seen in fewer steps: "every step" needs more than one
GPU_WORDS = "the GPU idles"
CPU_WORDS = "the host works outside the model's forward"


def host_call_findings(ev: E.Evidence) -> list:
    out = []
    for run in C.profile_runs(ev):
        if run.host is None:
            continue
        report, rank = run.host
        out.append(_outcome(ev, run, report, rank))
    if not out and C.profile_runs(ev):
        out.append(
            NotChecked(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                missing="the Python functions the host ran (a profile recorded with "
                "with_stack=True, as ncclprobe capture records it): without them the model's "
                "forward cannot be told from the host work around it, nor a function named",
                next_command=profile_command(ev.config.get("engine"), with_stack=True),
            )
        )
    return out


def _outcome(
    ev: E.Evidence, run: Any, report: HostReport, rank: int
) -> Finding | NotChecked | RuledOut:
    gpu = report.basis == "gpu-idle"
    top = report.functions[0] if report.functions else None
    of_step = (top.ms_per_step / report.step_ms) if top and report.step_ms else 0.0
    where = f"rank {rank}'s" if len(run.ranks) > 1 else "the"
    if report.steps < MIN_STEPS:
        return NotChecked(
            rule=RULE,
            hypothesis=HYPOTHESIS,
            missing=f"more steps: the profile holds {report.steps} with the model's forward in it, "
            f"and a host function behind every step needs {MIN_STEPS} or more",
        )
    if top is None or of_step < MIN_SHARE or top.steps < MIN_STEPS:
        return RuledOut(
            rule=RULE,
            hypothesis=HYPOTHESIS,
            reason=f"no host function covers {MIN_SHARE:.0%} of {where} median "
            f"{report.step_ms:.3f} ms step ("
            + f"{GPU_WORDS if gpu else CPU_WORDS} {report.gap_ms_per_step:.3f} ms"
            + f" per step over {report.steps} steps)",
        )
    toks = C.tokens(run)
    total = top.ms_per_step * report.steps
    share = C.share(total, run)
    severity = severity_for_share(share)
    if not gpu:
        severity = "warning" if severity == "error" else severity
    call = (
        f", {top.syncs_per_step:.0f} `{top.call}` calls per step"
        if top.syncs_per_step
        else f", in `{top.call}`"
        if top.call
        else ""
    )
    title = (
        f"{'the GPU idles' if gpu else 'the host spends'} {top.ms_per_step:.3f} ms per step "
        + ("while the host runs" if gpu else "outside the model's forward in")
        + f" `{_function(top.function)}`{call} ({of_step:.0%} of {where} {report.step_ms:.3f} ms step)"
    )
    others = "; ".join(
        f"`{_function(f.function)}` {f.ms_per_step:.3f} ms" for f in report.functions[1:]
    )
    basis = (
        f"Profiled per step over {report.steps} steps: {GPU_WORDS} {report.gap_ms_per_step:.3f} ms "
        f"of {report.step_ms:.3f} ms (median step); {top.ms_per_step:.3f} ms of it the host was in "
        f"`{top.function}`"
        + (f", after `{top.call}` had run the GPU's queue dry" if top.call else "")
        + ". Remove the sync or move that work off the step's critical path (overlap it with the "
        "GPU's work, run it on the GPU, or do it once for several steps)."
        if gpu
        else f"Profiled per step over {report.steps} steps on the CPU: {CPU_WORDS} for "
        f"{report.gap_ms_per_step:.3f} ms of {report.step_ms:.3f} ms (median step), "
        f"{top.ms_per_step:.3f} ms of it in `{top.function}`"
        + (
            f", which read values back to the host {top.syncs_per_step:.0f} times per step "
            f"(`{top.call}`: on a GPU each is a wait for the GPU)"
            if top.syncs_per_step
            else f" (in `{top.call}`)"
            if top.call
            else ""
        )
        + ". A CPU-only profile has no idle GPU to measure: the model ran on the host too. On a "
        "GPU this host work is time the GPU waits, unless the host runs ahead of it."
    )
    detail = (
        basis
        + (f" Next: {others}." if others else "")
        + " Times are the trace's: a profiler recording Python calls slows call-heavy Python, so "
        "they bound the unprofiled cost from above."
        + "".join(f" {n[0].upper()}{n[1:]}." for n in report.notes)
    )
    return Finding(
        rule=RULE,
        severity=severity,
        confidence="medium",
        title=title,
        detail=detail,
        evidence={
            "rank": rank,
            "basis": report.basis,
            "steps": report.steps,
            "step_ms": round(report.step_ms, 3),
            "gap_ms_per_step": round(report.gap_ms_per_step, 3),
            "functions": [
                {
                    "function": f.function,
                    "call": f.call,
                    "ms_per_step": round(f.ms_per_step, 3),
                    "share_of_gap": round(f.share, 3),
                    "steps": f.steps,
                    "syncs_per_step": round(f.syncs_per_step, 1),
                }
                for f in report.functions
            ],
            "python_stacks": report.python,
        },
        cost=_cost(run, gpu, top.ms_per_step, total, toks),
    )


def _cost(run: Any, gpu: bool, per_step: float, total: float, toks: C.Tokens) -> Cost:
    """At most the trace's time in the function (a profiler recording Python calls slows it), per
    token where the run's tokens are known. On a GPU it is part of the idle time `host-bound`
    (or the graph rules) already count: said, not counted again in the run's time ledger; on the
    CPU it is the run's own time outside the forward, counted there."""
    per_token = C.per_token(total, toks)
    unit, value = ("token", per_token) if per_token is not None else ("step", per_step)
    if gpu:
        return Cost.bound(
            value,
            unit,
            "the GPU idle time while the host ran this function, as profiled (part of the idle "
            "time host-bound counts; not counted again)",
        )
    return Cost.bound(
        value,
        unit,
        "the host's time in this function outside the model's forward, as profiled",
        run=run.name("trace"),
        covers=(),
        total_ms=total,
    )


def _function(name: str) -> str:
    """`generate.py(33): ngram_lookup` as `ngram_lookup (generate.py:33)`."""
    head, sep, func = name.partition("): ")
    if not sep or "(" not in head:
        return name
    path, _, line = head.rpartition("(")
    return f"{func} ({path}:{line})"


RULES = (host_call_findings,)
