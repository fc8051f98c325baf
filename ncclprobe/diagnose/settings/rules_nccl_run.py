"""What the NCCL debug logs of a job's ranks add to the diagnosis of its run (`diagnose --nccl-log`
beside a server log, profiles or an engine trace of a vLLM, SGLang or ncclprobe job): the settings
each rank's NCCL read against those the collecting shell had (collect-env), the NCCL version every
rank loaded, the transports NCCL connected the ranks with, and NCCL's WARN lines placed against
the time the server logged its decode steps. What NCCL read is linted with every other environment
(`rules_safety`).

NCCL logs every variable it reads (`VAR set by environment to VALUE`, the ENV subsystem, on by
default); a log with no such line says nothing about what was read (NCCL_DEBUG_SUBSYS without ENV,
or nothing set), so a rank is judged only where its log lists some. NCCL's INFO lines carry no
clock; its WARN lines do from 2.26 on (`[%F %T] `, local time): only those are placed in time.
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe.diagnose.rules_machines import one_machine
from ncclprobe.diagnose.run.sweep_match import tuning_settings
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.nccl.nccl_rank_logs import RankNcclLog
from ncclprobe.findings import Finding, NotChecked, Outcome, RuledOut
from ncclprobe.nccl.logged_reads import verdict_for
from ncclprobe.nccl.version import parse_version
from ncclprobe.secrets import mask_env_value, mask_text

P2P_OFF = {"NCCL_P2P_DISABLE": ("1",), "NCCL_P2P_LEVEL": ("LOC",)}  # as NCCL logs them


def nccl_run_findings(ev: E.Evidence) -> list:
    if not ev.nccl_logs:
        return []
    return _settings_read(ev) + _versions(ev) + _transports(ev) + _warnings(ev)


def _labels(ev: E.Evidence) -> list[str]:
    labels = [log.label for log in ev.nccl_logs]
    return labels if len(set(labels)) == len(labels) else [log.path for log in ev.nccl_logs]


def _ranks(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


# ---- the settings each rank's NCCL read ----------------------------------------------------


def _settings_read(ev: E.Evidence) -> list:
    """The collecting shell's NCCL settings against what each rank's NCCL read."""
    collect_env = ev.collect_env
    shell = tuning_settings(collect_env.nccl_settings) if collect_env else {}
    if collect_env is None or not shell:
        return []
    tool = collect_env.tool
    if not one_machine(ev):
        return [
            NotChecked(
                rule="nccl-settings-read",
                hypothesis=f"the NCCL settings {tool} shows reached every rank's NCCL",
                missing=f"a {tool} text of the job's own machine: this one describes another "
                "(see the finding `machines`)",
            )
        ]
    judged = [
        (label, log)
        for label, log in zip(_labels(ev), ev.nccl_logs)
        if tuning_settings(log.log.env)
    ]
    if not judged:
        return [
            NotChecked(
                rule="nccl-settings-read",
                hypothesis=f"the NCCL settings {tool} shows reached every rank's NCCL",
                missing="a `set by environment` line in the NCCL logs (NCCL_DEBUG=INFO with the ENV "
                "subsystem, on by default: NCCL_DEBUG_SUBSYS replaces it)",
            )
        ]
    unread: dict[str, list[tuple[str, str]]] = {}
    for label, log in judged:
        for name, value in shell.items():
            verdict = verdict_for(
                name, value, log.log.env.get(name), read=log.log.env, version=_version(log)
            )
            if verdict.startswith("ignored"):
                unread.setdefault(name, []).append((label, verdict.removeprefix("ignored: ")))
    out: list[Outcome] = [
        _unread_finding(ev, tool, name, shell[name], ranks) for name, ranks in unread.items()
    ]
    out += _read_elsewhere(ev, tool, shell, judged)
    if not unread:
        out.append(
            RuledOut(
                rule="nccl-settings-read",
                hypothesis=f"the NCCL settings {tool} shows did not reach the job's NCCL",
                reason=f"NCCL on {_ranks([label for label, _ in judged])} read "
                + ", ".join(f"{k}={mask_env_value(k, v)}" for k, v in sorted(shell.items())),
            )
        )
    return out


def _unread_finding(
    ev: E.Evidence, tool: str, name: str, value: str, ranks: list[tuple[str, str]]
) -> Finding:
    shown = mask_env_value(name, value)
    return Finding(
        rule="nccl-settings-read",
        severity="error",
        confidence="medium",
        title=f"{name}={shown} is set in the shell {tool} ran in, but NCCL on "
        f"{_ranks([label for label, _ in ranks])} did not read it",
        detail=(
            f"NCCL logs each variable it reads, and these ranks' logs list what their NCCL read; "
            f"for {name}: {'; '.join(f'{label}: {why}' for label, why in ranks)}. The workers were "
            "started with another environment than that shell's (a launcher, a container, a "
            "service unit), so the job ran with NCCL's default for it: every figure of the run "
            "was measured without the setting."
        ),
        evidence={
            "variable": name,
            "value": shown,
            "not_read_by": [label for label, _ in ranks],
            "logs": [log.path for log in ev.nccl_logs],
        },
        next_command=f"ncclprobe env-check --pid PID --expect {name}={shown}  # PID: a worker's",
    )


def _read_elsewhere(
    ev: E.Evidence, tool: str, shell: dict, judged: list[tuple[str, RankNcclLog]]
) -> list[Finding]:
    """Settings NCCL read that the shell did not have: set by a launcher, a container or a
    plugin (aws-ofi-nccl sets NCCL_PROTO itself); shown, since the job ran with them."""
    extra: dict[str, dict[str, str]] = {}
    for label, log in judged:
        for name, value in tuning_settings(log.log.env).items():
            if name not in shell:
                extra.setdefault(name, {})[label] = mask_env_value(name, value)
    if not extra:
        return []
    listing = "; ".join(
        f"{name}={', '.join(dict.fromkeys(values.values()))}" for name, values in extra.items()
    )
    return [
        Finding(
            rule="nccl-settings-read",
            severity="info",
            confidence="high",
            title=f"NCCL read settings the shell {tool} ran in does not have: {listing}"[:200],
            detail=(
                "The job's NCCL ran with these (its logs say so), set somewhere between that shell "
                "and the workers: a launcher, a container image, or a network plugin (aws-ofi-nccl "
                "adds NCCL_PROTO). They shape every collective of the run; the lint judges them "
                "with the other environments."
            ),
            evidence={"read": extra},  # variable -> rank -> value
        )
    ]


# ---- versions -------------------------------------------------------------------------------


def _version(log: RankNcclLog) -> str | None:
    return log.log.nccl_version


def _versions(ev: E.Evidence) -> list:
    by_rank = {
        label: sorted(log.log.versions, key=lambda v: parse_version(v) or ())
        for label, log in zip(_labels(ev), ev.nccl_logs)
        if log.log.versions
    }
    seen = sorted({v for versions in by_rank.values() for v in versions})
    if not seen:
        return []
    hypothesis = "the job's ranks run different NCCL versions"
    if len(seen) > 1:
        listing = "; ".join(f"{label}: {', '.join(v)}" for label, v in by_rank.items())
        return [
            Finding(
                rule="nccl-version",
                severity="error",
                confidence="high",
                title=f"the job's ranks loaded different NCCL versions ({', '.join(seen)})",
                detail=(
                    f"NCCL's own banner in each log: {listing}. Ranks of one communicator must run "
                    "one NCCL: versions differ in their protocols, tuning and wire formats, which "
                    "slows or hangs collectives. Usually two installs (a pip wheel and a system "
                    "libnccl, or an image's NCCL under LD_LIBRARY_PATH) on different nodes or "
                    "workers."
                ),
                evidence={"versions_by_rank": by_rank},
            )
        ]
    out = []
    collect_env = ev.collect_env
    collected = collect_env.nccl_version if collect_env else None
    if (
        collect_env is not None
        and one_machine(ev)  # another machine's NCCL says nothing of this job's workers
        and collected
        and parse_version(collected)
        and parse_version(collected) != parse_version(seen[0])
    ):
        out.append(
            Finding(
                rule="nccl-version",
                severity="warning",
                confidence="medium",
                title=f"the job's NCCL is {seen[0]}, not the {collected} {collect_env.tool} reports",
                detail=(
                    f"Every rank's log says NCCL {seen[0]}; the shell {collect_env.tool} ran in "
                    f"has {collected}. The workers load another library (a system libnccl, "
                    "LD_LIBRARY_PATH or LD_PRELOAD, another image): facts and fixes for "
                    f"{collected} do not apply to this job; judge its settings for {seen[0]}."
                ),
                evidence={"job": seen[0], "collect_env": collected},
            )
        )
    return out or [
        RuledOut(
            rule="nccl-version",
            hypothesis=hypothesis,
            reason=f"every NCCL log ({len(by_rank)}) reports NCCL {seen[0]}",
        )
    ]


# ---- transports -----------------------------------------------------------------------------


def _transports(ev: E.Evidence) -> list:
    """How NCCL connected the ranks: P2P (NVLink or PCIe), SHM (through host memory) or NET."""
    hypothesis = "NCCL connects the ranks of one node without P2P (through host memory or NET)"
    counts: dict[str, int] = {}
    for log in ev.nccl_logs:
        for kind, n in log.log.transports.items():
            counts[kind] = counts.get(kind, 0) + n
    if not counts:
        return [
            NotChecked(
                rule="nccl-transport",
                hypothesis=hypothesis,
                missing="the `Channel ... via ...` connection lines (NCCL_DEBUG=INFO, INIT subsystem)",
            )
        ]
    listing = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
    nodes = max(
        (c.get("nnodes") or 0 for log in ev.nccl_logs for c in log.log.communicators), default=0
    )
    if "P2P" in counts:
        return [
            RuledOut(
                rule="nccl-transport",
                hypothesis=hypothesis,
                reason=f"NCCL connected ranks through P2P (connection lines: {listing}"
                + ("; NET between nodes)" if "NET" in counts else ")"),
            )
        ]
    if nodes > 1:
        return [
            NotChecked(
                rule="nccl-transport",
                hypothesis=hypothesis,
                missing=f"which connections stay inside a node: NCCL counted {nodes} nodes and "
                f"connected over {listing} (these logs do not tell whether nodes share a host)",
            )
        ]
    return [_no_p2p_finding(ev, counts, listing)]


def _no_p2p_finding(ev: E.Evidence, counts: dict, listing: str) -> Finding:
    off = {
        name: value
        for log in ev.nccl_logs
        for name, value in log.log.env.items()
        if value in P2P_OFF.get(name, ())
    }
    node = ev.node if one_machine(ev) else None  # another machine's links are not these ranks'
    nvlink = bool(node and node.any_nvlink)
    via = "the network transport" if "NET" in counts else "host memory (SHM)"
    cause = (
        f"NCCL read {', '.join(f'{k}={v}' for k, v in off.items())}, which turns P2P off"
        if off
        else "NCCL found no usable P2P path: P2P unsupported between these GPUs, blocked by "
        "the platform (ACS, IOMMU, a VM or container), or beyond NCCL_P2P_LEVEL's default"
    )
    return Finding(
        rule="nccl-transport",
        severity="error" if nvlink else "warning",
        confidence="high" if (nvlink or off) else "medium",
        title=f"NCCL connected the ranks on one node through {via}, not P2P"
        + (" although the GPUs have NVLink" if nvlink else ""),
        detail=(
            f"Connection lines in the NCCL logs: {listing}, none via P2P. Every collective's data "
            f"then goes through {via} instead of GPU to GPU, at a fraction of the bandwidth and "
            f"with more latency per step. {cause}."
        ),
        evidence={
            "transports": counts,
            "p2p_off_read": off,
            "node": node.to_json() if node else None,
        },
        next_command="ncclprobe topo --check",
    )


# ---- WARN lines, placed against the run -----------------------------------------------------


def _warnings(ev: E.Evidence) -> list:
    """WARN lines placed against the run's logged steps; with a hang's evidence beside the run
    `rules_nccl_log` places them against the stuck collective instead."""
    if ev.flight_recorder or ev.job_logs:
        return []
    out: list[Outcome] = []
    spans = [
        (run.path, (run.log or {})["logged_span"])
        for run in ev.runs
        if (run.log or {}).get("logged_span")
    ]
    for label, log in zip(_labels(ev), ev.nccl_logs):
        warns = list(zip(log.log.warnings, log.log.warning_times))
        if not warns:
            continue
        placed = [_place(when, spans) for _, when in warns]
        during = [p for p in placed if p.startswith("while")]
        out.append(
            Finding(
                rule="nccl-warn",
                severity="warning",
                confidence="medium" if during else "low",
                title=f"{label}'s NCCL log has {len(warns)} WARN line(s): {mask_text(warns[0][0])[:160]}"
                + (f" ({placed[0]})" if placed[0] else ""),
                detail=(
                    f"{log.path}: "
                    + "; ".join(mask_text(w)[:200] + (f" [{t}]" if t else "") for w, t in warns[:3])
                    + ". "
                    + _when_text(placed, spans, ev.kind)
                ),
                evidence={
                    "log": log.path,
                    "rank": log.rank,
                    "warnings": [mask_text(w) for w, _ in warns[:10]],
                    "times": [t for _, t in warns[:10]],
                    "relative_to_run": placed[:10],
                },
            )
        )
    if not out:
        out.append(
            RuledOut(
                rule="nccl-warn",
                hypothesis="NCCL warned about the job (a transport, topology or CUDA error)",
                reason=f"none of the {len(ev.nccl_logs)} NCCL log(s) has a WARN line",
            )
        )
    return out


def _when_text(placed: list[str], spans: list[tuple[str, dict]], kind: str) -> str:
    if any(placed):
        return (
            "Times are the logs' own clocks (NCCL's local time, the server's), compared as "
            "written: a WARN while the server logged decode steps came near the steps it may "
            "have slowed; one before them, at start-up, shaped how NCCL set up every later "
            "collective."
        )
    if not spans:
        return (
            f"When each line came relative to the slow steps is not observable here: the run's "
            f"evidence ({kind}) carries no wall clock (a timestamped SGLang or vLLM server log does)"
        )
    return (
        "When each line came relative to the slow steps is not observable here: NCCL stamps "
        "WARN lines from 2.26 on"
    )


def _place(when: str | None, spans: list[tuple[str, dict]]) -> str:
    """`while the server logged decode steps (8 s after the first)`, `before ...`, `after ...`;
    '' when the WARN or the run has no time."""
    if not when or not spans:
        return ""
    stamp = when.replace("T", " ")[:19]
    for path, span in spans:
        first, last = (_with_year(span[k], stamp) for k in ("first", "last"))
        if first is None or last is None:
            continue
        name = Path(path).name
        if stamp < first:
            return f"before the first decode step of {name}, {span['first']}"
        if stamp > last:
            return f"after the last decode step of {name}, {span['last']}"
        return f"while {name} logged decode steps, {span['first']} to {span['last']}"
    return ""


def _with_year(logged: str, like: str) -> str | None:
    """A server log's time in the WARN's `YYYY-MM-DD HH:MM:SS` form: vLLM's lines name no year,
    so the WARN's is assumed (a run across New Year's Eve would be misplaced)."""
    if len(logged) == 19:
        return logged
    return f"{like[:4]}-{logged}" if len(logged) == 14 else None


RULES = (nccl_run_findings,)
