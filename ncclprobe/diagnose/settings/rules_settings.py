"""Hypotheses about NCCL settings: did they reach every worker, were they in force when NCCL
created the communicators (and so when the graphs were captured), and do two compared runs
really differ in them? One pure function each, as in `rules`.

What a worker reports (the view's `Worker`, from the engine trace's `workers[]`; profiles and logs
have none, so these rules stay silent on them): `env_at_comm_init`, its NCCL_* environment when it
created its communicator (what NCCL's per-communicator reads see, and what a CUDA graph captured
on it keeps); `nccl_read`, what NCCL's own debug log says it read (empty without NCCL, e.g. gloo);
and `later_env`, a later snapshot (`env_after_comm_init` / `env_at_exit`): a value that appears only
there was set after NCCL read it.
"""

from __future__ import annotations

from dataclasses import replace

from ncclprobe.diagnose.commands import engine_command
from ncclprobe.diagnose.run.levers import libraries, nccl_ran
from ncclprobe.diagnose.run.sweep_match import tuning_settings
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.run.view import EngineRun, Worker, nccl_env
from ncclprobe.findings import Finding, NotChecked, Outcome, RuledOut
from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import acts_on_one_rank, effective_scope
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.values import as_logged, reads_the_same
from ncclprobe.nccl.version import parse_version

UNSET = "<unset>"


def settings_reached_workers(ev: E.Evidence) -> list:
    """Every setting a run asked for is in every worker's environment at communicator creation,
    and, where NCCL logged what it read, NCCL read that value. The same problem in several runs
    (modes, labels) is one finding naming them all; a value NCCL ignores because it is invalid is
    the lint's finding (`rules_safety`, the cause), not a second one here about the symptom."""
    out: list[Outcome] = []
    problems = []
    runs_with: dict[tuple[str, str], tuple] = {}
    for source, run in ev.all_runs():
        asked = tuning_settings(run.settings)
        workers = [w for w in run.workers if w.env_at_comm_init is not None]
        if not asked:
            continue
        if not workers:
            out.append(
                NotChecked(
                    rule="settings-propagation",
                    hypothesis=f"{run.name(source)}: settings never reached a worker",
                    missing="the workers reported no environment at communicator creation",
                )
            )
            continue
        found = [p for w in workers for p in _worker_problems(w, asked, one_rank=len(workers) == 1)]
        for p in found:
            p["run"] = run.name(source)
            runs_with.setdefault((p["variable"], p["kind"]), (source, run))
        problems += found
        if not found:
            out.append(
                RuledOut(
                    rule="settings-propagation",
                    hypothesis=f"{run.name(source)}: settings never reached a worker",
                    reason=f"all {len(workers)} workers had {_fmt(asked)} when they created their communicator"
                    + (
                        " and NCCL reported reading it" if any(w.nccl_read for w in workers) else ""
                    ),
                )
            )
    for (variable, kind), group in _grouped(problems).items():
        source, run = runs_with[(variable, kind)]
        out.append(_propagation_finding(ev, source, run, tuning_settings(run.settings), group))
    return out


def _grouped(problems: list[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for p in problems:
        groups.setdefault((p["variable"], p["kind"]), []).append(p)
    return groups


def _worker_problems(worker: Worker, asked: dict, *, one_rank: bool = False) -> list[dict]:
    had, read, later = nccl_env(worker.env_at_comm_init), worker.nccl_read, worker.later_env
    invalid = {
        f.variable for f in lint_env(had, nccl_version=worker.nccl_version) if f.severity == "error"
    }
    problems = []
    for var, value in asked.items():
        base = {"rank": worker.rank, "pid": worker.pid, "variable": var, "asked": value}
        if had.get(var) != value:
            kind = "set-after-init" if later.get(var) == value else "not-propagated"
            problems.append(
                {
                    **base,
                    "at_comm_init": had.get(var, UNSET),
                    "later": later.get(var, UNSET),
                    "kind": kind,
                }
            )
        elif read and var not in read and var in invalid:
            continue  # NCCL ignores an invalid value: unsafe-settings names that cause
        elif read and var not in read:  # NCCL logged what it read (ENV lines), but not this one
            kind = "no-peer" if one_rank and not acts_on_one_rank(var) else "not-read"
            problems.append({**base, "at_comm_init": value, "nccl_read": None, "kind": kind})
        elif read and not reads_the_same(var, value, str(read[var])):
            problems.append(
                {**base, "at_comm_init": value, "nccl_read": read[var], "kind": "read-other-value"}
            )
    return problems


def _propagation_finding(
    ev: E.Evidence, source: str, run: EngineRun, asked: dict, problems: list[dict]
) -> Finding:
    finding = _propagation_one(ev, source, run, asked, problems)
    runs = list(dict.fromkeys(p["run"] for p in problems))
    if len(runs) > 1:
        finding = replace(
            finding, detail=f"{finding.detail} The same in {len(runs)} runs: {', '.join(runs)}."
        )
    return finding


def _propagation_one(
    ev: E.Evidence, source: str, run: EngineRun, asked: dict, problems: list[dict]
) -> Finding:
    after = [p for p in problems if p["kind"] == "set-after-init"]
    first = (after or problems)[0]
    where = f"rank {first['rank']} (pid {first['pid']})"
    if first["kind"] == "no-peer":
        return Finding(
            rule="settings-propagation",
            severity="info",
            confidence="high",
            title=f"{first['variable']}={first['asked']} cannot act on one rank, and NCCL did not read it there",
            detail=(
                f"The run has one rank, so NCCL connects no peers and runs no tuning model: it has no "
                f"use for {first['variable']} (NCCL_PROTO and NCCL_ALGO are never read by a one-rank "
                f"communicator; a valid P2P level still is, by NCCL 2.27+), and its log shows no read "
                f"of it. That is not a lost setting; its effect can only be measured with two or more "
                f"ranks."
            ),
            evidence={"run": first["run"], "asked": asked, "problems": problems},
            next_command=engine_command(ev.config, tp=2, trace_out="trace-tp2.json"),
        )
    if after:
        late_ranks = sorted(
            {p["rank"] for p in after if p["variable"] == first["variable"]}, key=str
        )
        if len(late_ranks) > 1:
            where = f"{len(late_ranks)} workers (ranks {', '.join(map(str, late_ranks))})"
        worker = next((w for w in run.workers if w.rank == first["rank"]), None)
        scope = effective_scope(
            first["variable"],
            nccl_env(worker.env_at_comm_init if worker else None),
            parse_version(worker.nccl_version if worker else None),
        )
        consequence = (
            "it applies only to communicators created after it was set, and graphs captured on the old one "
            "keep the old value"
            if scope is Scope.COMMUNICATOR
            else "NCCL reads it once per process, so it needs a new process"
        )
        title = f"{first['variable']}={first['asked']} was set in {where} after NCCL created its communicator"
        detail = (
            f"At communicator creation {where} had {first['variable']}={first['at_comm_init']}; the value "
            f"{first['asked']} appeared only later. {first['variable']} is read per {scope.value}: {consequence}."
        )
        fix = (
            engine_command(ev.config, env=f"{first['variable']}={first['asked']}")
            + "  # set before the workers start"
        )
    elif all(p["kind"] == "not-read" for p in problems):
        title = f"NCCL in {where} logged the variables it read, but not {first['variable']}"
        detail = (
            f"The worker had {first['variable']}={first['asked']} when it created its communicator, yet NCCL's debug "
            f"log lists other `set by environment` lines and not this one: NCCL did not read it there (a "
            f"variable read elsewhere or only by newer NCCL versions), or the log misses its subsystem."
        )
        fix = f"ncclprobe knobs {first['variable']}"
    elif first["kind"] == "read-other-value":
        title = (
            f"NCCL in {where} read {first['variable']}={first['nccl_read']}, not {first['asked']}"
        )
        detail = (
            f"The worker's environment had {first['variable']}={first['asked']}, which NCCL would log as "
            f"{as_logged(first['variable'], first['asked'])}, but its log reports {first['nccl_read']}: NCCL "
            "read another value than the worker's environment held. Possible sources: the process changed "
            "it after NCCL had read it (a per-process variable keeps its first value) or an environment "
            "plugin (NCCL_ENV_PLUGIN, 2.28+); NCCL's config files (NCCL_CONF_FILE, ~/.nccl.conf, "
            "/etc/nccl.conf) never override a variable the environment holds (setenv without "
            "overwrite, src/misc/param.cc)."
        )
        fix = (
            f"ncclprobe knobs {first['variable']}  # then, in your live job: ncclprobe env-check --pid PID "
            f"--expect {first['variable']}={first['asked']} --log NCCL_LOG"
        )
    else:
        ranks = sorted({p["rank"] for p in problems})
        title = (
            f"{first['variable']}={first['asked']} never reached {len(ranks)} worker(s) (ranks "
            f"{', '.join(map(str, ranks))})"
        )
        detail = (
            f"The {run.label} {run.mode} run asked for {_fmt(asked)}, but {where} created its communicator "
            f"with {first['variable']}={first['at_comm_init']}: the setting was lost between the launcher "
            "and the worker, "
            f"so this run measured NCCL's defaults, not the setting."
        )
        fix = (
            engine_command(
                ev.config, env=f"{first['variable']}={first['asked']}", trace_out="trace-again.json"
            )
            + f"  # in your live job: ncclprobe env-check --pid PID --expect {first['variable']}={first['asked']}"
        )
    only_unread = all(p["kind"] == "not-read" for p in problems)
    return Finding(
        rule="settings-propagation",
        severity="warning" if only_unread else "error",
        confidence="medium" if only_unread else "high",
        title=title,
        detail=detail,
        evidence={"run": problems[0]["run"], "asked": asked, "problems": problems},
        next_command=fix,
    )


def tuned_vs_untuned(ev: E.Evidence) -> list:
    """Runs labelled differently (tuned/untuned, or this trace against --baseline) whose
    collectives were created - and captured - under the same NCCL settings: tuning could not
    change them, so their difference is noise or something else."""
    out: list[Outcome] = []
    runs = ev.all_runs()
    for i, (src_a, a) in enumerate(runs):
        for src_b, b in runs[i + 1 :]:
            if a.mode != b.mode or (a.label == b.label and src_a == src_b):
                continue
            asked_differ = tuning_settings(a.settings) != tuning_settings(b.settings)
            if not asked_differ:
                continue
            out.append(_compare_pair(ev, (src_a, a), (src_b, b)))
    return out


def _compare_pair(ev: E.Evidence, pa: tuple[str, EngineRun], pb: tuple[str, EngineRun]) -> Outcome:
    (src_a, a), (src_b, b) = pa, pb
    name_a, name_b = a.name(src_a), b.name(src_b)
    eff_a, eff_b = a.effective_settings(), b.effective_settings()
    hyp = f"{name_a} vs {name_b}: the runs differ in NCCL settings"
    if eff_a is None or eff_b is None:
        return NotChecked(
            rule="tuned-same-settings",
            hypothesis=hyp,
            missing="the workers' environments at communicator creation are missing or disagree",
        )
    if tuning_settings(eff_a) != tuning_settings(eff_b):
        return RuledOut(
            rule="tuned-same-settings",
            hypothesis=f"{name_a} and {name_b} ran under the same NCCL settings",
            reason=f"their communicators were created under different settings ({_fmt(tuning_settings(eff_a))} "
            f"vs {_fmt(tuning_settings(eff_b))}): the comparison measures them",
        )
    captured = a.captured_graphs() and b.captured_graphs()
    how = "captured their collectives in CUDA graphs" if captured else "created their communicators"
    speed = {"tokens_per_s": {name_a: a.tokens_per_s, name_b: b.tokens_per_s}}
    return Finding(
        rule="tuned-same-settings",
        severity="error",
        confidence="high",
        title=f"{name_a} and {name_b} {how} under the same NCCL settings",
        detail=(
            f"They asked for {_fmt(tuning_settings(a.settings))} and {_fmt(tuning_settings(b.settings))}, "
            f"but both {how} under {_fmt(tuning_settings(eff_a))}: tuning could not change their collectives, so any "
            f"difference between them ({_tok_s(a)} vs {_tok_s(b)} tok/s) is noise or another cause."
            + (
                ""
                if nccl_ran(ev)
                else " Here NCCL did not run at all (the collectives ran on "
                + (", ".join(sorted(libraries(ev))) or "a backend the evidence does not name")
                + "): no NCCL setting acts on them either way."
            )
        ),
        evidence={
            "asked": {name_a: a.settings, name_b: b.settings},
            "in_force_at_comm_init": tuning_settings(eff_a),
            "graphs": sorted(a.captured_graphs()),
            **speed,
        },
        next_command=_clean_env_command(ev, pa, pb, eff_a),
    )


def _clean_env_command(
    ev: E.Evidence, pa: tuple[str, EngineRun], pb: tuple[str, EngineRun], in_force: dict
) -> str:
    """Re-run from an environment without the settings the untuned side inherited."""
    inherited = sorted(
        k
        for (_, run) in (pa, pb)
        for k in tuning_settings(in_force)
        if k not in tuning_settings(run.settings)
    )
    prefix = "env " + " ".join(f"-u {k}" for k in sorted(set(inherited))) + " " if inherited else ""
    command, _, remark = engine_command(
        ev.config, tuned=True, trace_out="trace-tuned.json"
    ).partition("  # ")
    steps = " && ".join(
        prefix + step for step in command.split(" && ")
    )  # `env -u` acts on one step
    return (
        steps
        + "  # --tuned alone sweeps first; or --tuned FILE, the recommendation you used"
        + (f"; {remark}" if remark else "")
    )


def settings_between_modes(ev: E.Evidence) -> list:
    """Baseline and speculative of one label: were their collectives under the same settings?
    If so, NCCL settings cannot explain the gap between them."""
    out: list[Outcome] = []
    for run in ev.runs:
        if run.mode != "speculative" or run.source != "engine-trace":
            continue  # profiles and logs carry no worker environments: rules_profile weighs their collectives
        base = E.find_run(ev.runs, mode="baseline", label=run.label)
        if not base:
            continue
        eff_s, eff_b = run.effective_settings(), base.effective_settings()
        hyp = f"{run.label}: NCCL settings explain the speculative/baseline difference"
        if eff_s is None or eff_b is None:
            out.append(
                NotChecked(
                    rule="nccl-settings",
                    hypothesis=hyp,
                    missing="workers' environments at communicator creation",
                )
            )
        elif tuning_settings(eff_s) == tuning_settings(eff_b):
            both = bool(run.captured_graphs()) and bool(base.captured_graphs())
            captured = "captured in graphs alike" if both else "created alike"
            out.append(
                RuledOut(
                    rule="nccl-settings",
                    hypothesis=hyp,
                    reason=f"identical in both runs ({_fmt(tuning_settings(eff_s))}), communicators "
                    f"{captured}: not the cause",
                )
            )
        else:
            out.append(
                Finding(
                    rule="nccl-settings",
                    severity="info",
                    confidence="high",
                    title=f"{run.label}: baseline and speculative ran under different NCCL settings",
                    detail="Their comparison mixes the speculative loop with a settings change.",
                    evidence={
                        "baseline": tuning_settings(eff_b),
                        "speculative": tuning_settings(eff_s),
                    },
                )
            )
    return out


def _tok_s(run: EngineRun) -> str:
    value = run.tokens_per_s
    return f"{value:.1f}" if isinstance(value, (int, float)) else "unknown"


def _fmt(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "NCCL defaults"


RULES = (settings_reached_workers, tuned_vs_untuned, settings_between_modes)
