"""What env-check shows of its Report: each process's judgement (`ProcessReport`), the JSON
document, rows for a table or CSV, notes, the title.

Everything here is built from masked views (`visible_env`, `display_value`); the raw
environments the walk read never reach an output.

Exit code: 3 when no process could be read; 1 when a process that matters (one with libnccl
mapped, or every readable process when none has it) misses an expectation (judged from NCCL's
log where one is given, else from /proc) or has a lint error; else 0. Disagreements between
/proc and NCCL's log are reported, and decide nothing on their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclprobe.diagnose.process_env.expect import ExpectationCheck
from ncclprobe.diagnose.process_env.logcheck import Disagreement
from ncclprobe.diagnose.report import Report
from ncclprobe.evidence.live.env_check_document import SCHEMA_VERSION, ExpectationStatus
from ncclprobe.evidence.live.environ import env_diff
from ncclprobe.evidence.live.logcheck import ProcessNcclLog
from ncclprobe.evidence.live.processes import ProcessEvidence
from ncclprobe.evidence.live.walk import ProcessInfo
from ncclprobe.secrets import display_value, visible_env

PROC_CAVEAT = (
    "/proc/PID/environ is each process's environment at exec: values a process sets later "
    "(os.environ, setenv) before or after creating its communicator are not visible there; "
    "--log with its NCCL_DEBUG=INFO log shows what NCCL really read"
)


@dataclass
class ProcessReport:
    info: ProcessInfo
    parent_env: dict[str, str] | None
    checks: list[ExpectationCheck] = field(default_factory=list)
    lint: list[dict] | None = None
    caveats: list[str] = field(default_factory=list)
    log: ProcessNcclLog | None = None

    @property
    def live(self) -> bool:
        return self.info.readable and self.info.status not in ("zombie", "gone")

    def diff(self, show_all: bool) -> dict[str, dict]:
        if self.parent_env is None or not self.live:
            return {}
        return env_diff(self.parent_env, self.info.environ, show_all)

    def to_json(self, show_all: bool) -> dict:
        info = self.info
        return {
            "pid": info.pid,
            "ppid": info.ppid,
            "depth": info.depth,
            "role": info.role,
            "status": info.status,
            "command": info.command,
            "readable": info.readable,
            "problem": info.problem,
            "libnccl": info.libnccl,
            "maps_readable": info.maps_readable,
            "gpus": info.gpus,
            "forked_from": info.forked_from,
            "env": visible_env(info.environ, show_all) if info.readable else None,
            "diff_from_parent": self.diff(show_all) if self.parent_env is not None else None,
            "checks": [c.to_json() for c in self.checks],
            "lint": self.lint,
            "nccl_log": (
                {
                    "path": self.log.path,
                    "nccl_version": self.log.nccl_version,
                    "read": {k: display_value(k, v) for k, v in self.log.env.items()},
                }
                if self.log
                else None
            ),
            "caveats": list(self.caveats),
        }


def document(
    ev: ProcessEvidence,
    reports: list[ProcessReport],
    disagreements: list[Disagreement],
    report: Report,
) -> dict:
    """The env-check JSON document (schema v1, as env-check always wrote it)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "env-check",
        "root_pid": ev.root_pid,
        "show_all": ev.show_all,
        "expectations": [
            {
                "variable": e.variable,
                "value": display_value(e.variable, e.value),
                "source": e.source,
            }
            for e in ev.expectations
        ],
        "processes": [p.to_json(ev.show_all) for p in reports],
        "log_checks": [d.to_json() for d in disagreements],
        "verdict": {
            "exit_code": report.verdict().exit_code,
            "checked_pids": sorted(p.info.pid for p in targets(reports)),
            "findings": [f.title for f in report.findings],
        },
        "notes": report.notes,
    }


def targets(reports: list[ProcessReport]) -> list[ProcessReport]:
    """The processes the verdict is about: those with libnccl mapped, else every live one."""
    live = [p for p in reports if p.live]
    with_nccl = [p for p in live if p.info.libnccl]
    return with_nccl or live


def all_notes(
    notes: list[str], reports: list[ProcessReport], disagreements: list[Disagreement]
) -> list[str]:
    """The gathering's notes, the /proc caveat, each process's caveats, the log cross-check, the lint
    of every process (one note per text, naming every pid it applies to)."""
    notes = list(notes) + [PROC_CAVEAT]
    notes += _grouped((p.info.pid, text) for p in reports for text in p.caveats)
    notes += [
        f"pid {d.pid}: {d.variable}: {d.kind} (/proc {display_value(d.variable, d.proc_value)!r}, "
        f"NCCL {display_value(d.variable, d.nccl_value)!r})"
        for d in disagreements
    ]
    notes += _grouped(
        (p.info.pid, f"lint {f['severity']}: {f['message']}") for p in reports for f in p.lint or ()
    )
    return notes


def rows(
    reports: list[ProcessReport], show_all: bool, *, table: bool, wide: bool = False
) -> list[dict]:
    """One row per process; `table`: as a table shows it (the role indented by depth, the command
    shortened unless `wide`: --wide cuts nothing, lists on lines of their own), else complete, for
    CSV."""
    joiner = "\n" if table else "; "
    expecting = any(p.checks for p in reports)
    return [_row(p, show_all, joiner, expecting, table, wide) for p in reports]


def title(root_pid: int, reports: list[ProcessReport], report: Report) -> str:
    live = sum(p.live for p in reports)
    return (
        f"env-check of pid {root_pid}: {len(reports)} processes, {live} readable; "
        f"exit {report.verdict().exit_code}"
    )


def _grouped(pairs: Iterable[tuple[int, str]]) -> list[str]:
    """One note per distinct text, naming every pid it applies to (a job has many alike workers)."""
    pids_by_text: dict[str, list[int]] = {}
    for pid, text in pairs:
        pids_by_text.setdefault(text, []).append(pid)
    return [
        f"pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))}: {text}"
        for text, pids in pids_by_text.items()
    ]


def _row(
    proc: ProcessReport, show_all: bool, joiner: str, expecting: bool, table: bool, wide: bool
) -> dict:
    from ncclprobe.evidence.live.walk import short_command

    info = proc.info
    env = visible_env(info.environ, show_all) if info.readable else {}
    # columns in order of importance (a narrow terminal leaves out the last ones): the verdict
    # against --expect and the settings, the command after them (100 columns left out settings)
    row = {
        "pid": info.pid,
        "ppid": info.ppid,
        "role": ("  " * min(info.depth, 4)) + info.role if table else info.role,
        "status": info.status,
        "nccl": "yes" if info.libnccl else ("no" if info.maps_readable else "?"),
        "gpus": ",".join(map(str, info.gpus)) if info.gpus else ("-" if info.gpus is None else ""),
        "expect": joiner.join(
            f"{c.variable} {c.status}" for c in proc.checks if c.status != ExpectationStatus.OK
        )
        or (ExpectationStatus.OK.value if proc.checks else ""),
        "settings": joiner.join(f"{k}={v}" for k, v in env.items())
        if info.readable
        else (info.problem or ""),
        "command": short_command(info.command) if table and not wide else info.command,
        "vs_parent": joiner.join(_diff_text(k, d) for k, d in proc.diff(show_all).items()),
    }
    if not expecting:  # no --expect: no empty column
        del row["expect"]
    return row


def _diff_text(name: str, change: dict) -> str:
    if change["parent"] is None:
        return f"+{name}={change['child']}"
    if change["child"] is None:
        return f"-{name}"
    return f"~{name}={change['child']}"
