"""Hypotheses about a profile's steps, one pure function each: steps where the GPU waits for the
host, the small eager kernels between graph replays, and a profile in which no step could be found
(steps launched kernel by kernel while a comparison replays graphs: `rules_profile_eager`; how the
causes add up against a baseline: `rules_profile_baseline`).

Every cost is per step, per token and a share of the run's profiled time (`profile_costs`); the
severity follows the share a cause could win (`findings.severity_for_share`), and each text says
what the profile measured and what is inferred from it. On an engine trace these stay silent (its
phases carry no GPU idle time; `rules` covers it).
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import graphs_command, profile_command
from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.diagnose.run.ledger import IDLE
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import EngineRun, Phase
from ncclprobe.findings import Cost, Finding, NotChecked, Outcome, RuledOut, severity_for_share

HOST_BOUND_IDLE = 0.30  # GPU idle for at least this share of a step: the host sets the pace
HOST_BOUND_MIN_MS = 0.05  # ... and for at least this long (a short step's idle is launch latency)
GLUE_WARN = 0.10  # glue between replays: a warning from a tenth of the run (never an error)


def host_bound(ev: E.Evidence) -> list:
    """Steps in which the GPU sits idle for a large share of the time, in every step (the 10th
    percentile of the steps' idle share, not their median), where no graphed reference tells how
    much of it capture would remove: the host sets the pace. Eager steps with a reference and
    graph replays are weighed by eager_steps and graph_glue."""
    out: list[Outcome] = []
    checked = False
    for run in C.profile_runs(ev):
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
    if not checked and C.profile_runs(ev) and not _no_gpu(ev):
        out.append(
            NotChecked(
                rule="host-bound",
                hypothesis="steps are host-bound",
                missing="GPU activity in the profile (GPU idle time inside a step cannot be known without it)",
                next_command=profile_command(ev.config.get("engine")),
            )
        )
    return out


def _no_gpu(ev: E.Evidence) -> bool:
    """The profiled processes had no GPU: no GPU event and no device the trace names (torch.profiler
    writes deviceProperties wherever CUDA was available). GPU idle time is then no question."""
    return ev.config.get("device") == "cpu" and not ev.config.get("gpus")


def _most_steps(phase: Phase) -> str:
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


def _host_bound_finding(
    ev: E.Evidence, run: EngineRun, phase: Phase, low: float, high: float, toks: C.Tokens
) -> Finding:
    every = low >= HOST_BOUND_IDLE
    syncs = phase.launches.get("sync", 0)
    total = (phase.idle_ms or 0.0) * phase.count  # host_bound: measured idle time only
    share, token_cost = C.share(total, run), C.per_token(total, toks)
    unit, units = C.unit_of(run, toks, phase)
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
        cost=Cost.profiled(
            total / units,
            unit,
            f"the GPU idle time of the {phase.name} steps, waiting for the host (profiled: the "
            "profiler slows the host)",
            inflation=C.PROFILER_INFLATION,
            run=run.name("trace"),
            covers=(phase.name, IDLE),
            total_ms=total,
        ),
        next_command=graphs_command(ev, phase.name) if phase.graphed is False else "",
    )


def graph_glue(ev: E.Evidence) -> list:
    """Graph-replayed steps that also launch eager kernels: the host's work between replays
    (sampling, stopping checks, the next inputs) around a few small kernels. What it costs is the
    step's time outside the replay's kernels; at most a warning, the graph itself is replayed."""
    out: list[Outcome] = []
    for run in C.profile_runs(ev):
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
                    cost=Cost.profiled(
                        per,
                        "token" if tokens else "step",
                        f"the {phase.name} steps' time outside the graph replay's kernels: the "
                        "host's work and eager kernels between replays (profiled)",
                        inflation=C.PROFILER_INFLATION,
                        run=run.name("trace"),
                        covers=(phase.name, "glue"),
                        total_ms=glue * phase.count,
                    ),
                )
            )
    return out


def profile_limits(ev: E.Evidence) -> list:
    """What the profile could not show. No step at all is a finding, not a silence: a run with no
    findings must be a healthy run, not an unread one."""
    out: list[Outcome] = []
    for run in C.profile_runs(ev):
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
            if ev.config.get("record_shapes") and _no_gpu(ev):
                continue  # shapes recorded, no token-embedding lookup, no GPU: not a decoding job
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


RULES = (host_bound, graph_glue, profile_limits)
