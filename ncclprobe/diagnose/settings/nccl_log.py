"""`ncclprobe nccl-log` judged: what an NCCL debug log (one or several files, read as one) says NCCL
read and did, its failure lines explained (`ncclprobe.evidence.nccl.nccl_failures`: each known kind
once, with its cause and fix), its other WARN lines, and the settings rule set over what NCCL read.

Findings: each explained kind at its severity; the WARN lines no kind explains, as one error (NCCL
prints WARN when something failed); the other lines that look like a failure and no class explains
(`evidence.failure_lines`), as the one not-explained finding; the lint's findings. Any of the
first three at warning or worse fails the verdict, the lint's only at error; a harmless line (no
libibverbs on a machine without InfiniBand) does not.
"""

from __future__ import annotations

from ncclprobe.diagnose.report import Report, RuleSet, Table, judge
from ncclprobe.diagnose.settings import rules_known_bad
from ncclprobe.diagnose.settings.lint import LINT, masked
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.failure_lines import not_explained_finding
from ncclprobe.evidence.nccl.nccl_failures import Explained
from ncclprobe.evidence.nccl.nccl_failures import explain as _explain
from ncclprobe.evidence.nccl.nccl_log import NcclLog
from ncclprobe.findings import Finding
from ncclprobe.nccl.lint_finding import SettingFinding
from ncclprobe.secrets import mask_env, mask_text
from ncclprobe.sizes import format_size

_LAST: list[tuple[NcclLog, tuple[list[Explained], list[str]]]] = []  # one log per command


def explain(log: NcclLog) -> tuple[list[Explained], list[str]]:
    """(the explained kinds, the WARN lines no kind explains), once per log: explaining takes the
    explained lines out of the log's failure lines, so a second call would see fewer."""
    if not _LAST or _LAST[0][0] is not log:
        _LAST[:] = [(log, _explain(log))]
    return _LAST[0][1]


def failure_findings(ev: Evidence) -> list[Finding]:
    log = ev.nccl_log
    if log is None:  # the rule set needs it (`NCCL_LOG`)
        return []
    explained, unexplained = explain(log)
    found = [
        Finding(
            rule=e.kind,
            severity=e.severity,
            confidence=e.confidence,
            title=mask_text(e.message),
            detail=f"{e.lines} log line(s).",
            next_command="",
            evidence={"lines": e.lines, "fix": e.fix},
        )
        for e in explained
    ]
    if unexplained:
        found.append(
            Finding(
                rule="nccl-warn",
                severity="error",
                confidence="high",
                title=f"NCCL printed {len(unexplained)} WARN line(s) that no known failure explains",
                detail="; ".join(mask_text(w) for w in unexplained[:3]),
            )
        )
    not_explained = not_explained_finding([log.failure_lines])
    return found + ([not_explained] if not_explained else [])


NCCL_LOG = RuleSet("NCCL log", (failure_findings,), needs=("nccl_log",), fails_at="warning")
# a row that needs a condition the log cannot show is said (info) without failing the run
KNOWN_BAD = RuleSet(
    "known-bad NCCL releases",
    (rules_known_bad.nccl_log_findings,),
    needs=("nccl_log",),
    fails_at="warning",
)


def nccl_log_report(ev: Evidence, files: list[str]) -> Report:
    """The NCCL-log and settings rule sets over the log, with its table of what NCCL read and did."""
    log = ev.nccl_log
    if log is None:
        raise ValueError("nccl-log judges a gathered NCCL log")
    report = judge(ev, (NCCL_LOG, KNOWN_BAD, LINT), kind="nccl-log", fails_at="error")
    known_bad = [f for f in report.findings if f.rule == rules_known_bad.RULE]
    lint = [f for f in report.findings if isinstance(f, SettingFinding)]
    explained, unexplained = explain(log)
    report.document = {
        "headline": _title(log),  # the table's title: the one-line summary in JSON too
        **log.to_json(),
        "files": list(files),
        "lint": [masked(f) for f in lint],
        "explained": [e.to_json() for e in explained],
        "known_bad": [
            {"row": f.evidence["row"], "seen": f.evidence["failure_seen"], "text": f.detail}
            for f in known_bad
        ],
    }
    report.notes = [f"{e.severity}: {mask_text(e.message)}; fix: {e.fix}" for e in explained]
    report.notes += [f"{f.severity}: {mask_text(f.message)}" for f in lint]
    report.notes += [f"{f.severity}: {f.detail}" for f in known_bad]
    report.rows = _rows(log, unexplained)
    report.sections = [Table(report.rows, title=_title(log), notes=report.notes)]
    return report


def _title(log: NcclLog) -> str:
    library = log.library or "NCCL"
    version = log.nccl_version or "(version not logged)"
    if log.library == "RCCL":  # its build tag (2.21.5-HEAD:9a0e6a1) names the RCCL build
        version = (
            f"{log.nccl_version_full} (ROCm's NCCL; its number is the NCCL release it follows)"
        )
    if log.version_source and log.version_source != "banner":
        version += f" (from {log.version_source})"
    if log.nccl_lines == 0:  # a run that failed before NCCL logged: its failure lines follow
        return f"{library} {version}: no NCCL line; the run's failure lines are below"
    coll = log.channel_counts.get("coll")
    return (
        f"{library} {version}, {log.nranks or '?'} ranks, "
        f"{len(log.pids)} process(es), {log.nccl_lines} NCCL lines"
        + (f", {coll} coll channels" if coll is not None else "")
    )


def _rows(log: NcclLog, warnings: list[str]) -> list[dict]:
    rows = [
        {"what": "set by environment", "detail": f"{k}={v}"} for k, v in mask_env(log.env).items()
    ]
    rows += [
        {"what": "transport", "detail": f"{kind}: {count} connection lines"}
        for kind, count in log.transports.items()
    ]
    if log.channel_counts:  # the last communicator's `N coll channels, ...` line
        counts = ", ".join(f"{n} {kind}" for kind, n in log.channel_counts.items())
        rows.append({"what": "channels", "detail": f"{counts} channels (the last logged)"})
    rows += [{"what": "tuning", "detail": line} for line in tuning_summary(log)]
    rows += [{"what": "calls", "detail": f"{name}: {count}"} for name, count in log.calls.items()]
    rows += [{"what": "WARN", "detail": mask_text(text)} for text in warnings]
    rows += [
        {
            "what": "not explained",
            "detail": f"{line.source}:{line.number}: {line.text}"
            + (f" (x{line.count})" if line.count > 1 else ""),
        }
        for line in log.failure_lines.lines
    ]
    if log.failure_lines.more:
        rows.append({"what": "not explained", "detail": f"and {log.failure_lines.more} more"})
    return rows


def tuning_summary(log: NcclLog) -> list[str]:
    """`AllReduce RING/SIMPLE 32K..64M (12 calls)`: consecutive sizes with one choice merged."""
    groups: dict[tuple, list[int]] = {}
    for entry in log.tuning:
        groups.setdefault((entry.collective or "?", entry.algo, entry.proto), []).append(
            entry.bytes
        )
    return [
        f"{coll} {algo}/{proto} {format_size(min(sizes))}..{format_size(max(sizes))} ({len(sizes)} calls)"
        for (coll, algo, proto), sizes in groups.items()
    ]
