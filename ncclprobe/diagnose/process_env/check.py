"""env-check judged: which NCCL settings each process of a running job really has, against what was
expected and the knowledge table's lint.

The evidence is `ncclprobe.evidence.live.processes.ProcessEvidence` (gathered live by
`ncclprobe.gather.processes`: the /proc walk, each environment masked on output, the NCCL logs).
The rule set `PROCESS_ENV` judges each process (`process_reports`: its expectations, judged from
NCCL's log where one is given, else from /proc; its lint; its caveats) and finds, in the processes
that matter (those with libnccl mapped, or every readable one when none has it), every expectation
missed and every lint error; `env-check` runs it alone (`env_check_report`), `diagnose --env-check
PID` beside its own. Disagreements between /proc and NCCL's log are shown, and decide nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from ncclprobe.diagnose.process_env import expect as _expect
from ncclprobe.diagnose.process_env.logcheck import Disagreement, cross_check
from ncclprobe.diagnose.process_env.report import (
    ProcessReport,
    all_notes,
    document,
    rows,
    targets,
    title,
)
from ncclprobe.diagnose.report import Report, RuleSet, Table, judge
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.live.env_check_document import ExpectationStatus
from ncclprobe.evidence.live.logcheck import ProcessNcclLog
from ncclprobe.evidence.live.processes import Expectation, ProcessEvidence
from ncclprobe.evidence.live.walk import ProcessInfo
from ncclprobe.findings import Finding
from ncclprobe.secrets import display_value


def process_reports(ev: ProcessEvidence) -> list[ProcessReport]:
    """Each process judged: its expectations, its lint, what its evidence cannot show."""
    by_pid = ev.by_pid()
    return [
        _process_report(
            info,
            by_pid.get(info.ppid) if info.ppid is not None else None,
            ev.expectations,
            ev.logs.get(info.pid),
        )
        for info in ev.processes
    ]


def disagreements(ev: ProcessEvidence) -> list[Disagreement]:
    by_pid = ev.by_pid()
    return [
        d
        for pid, log in ev.logs.items()
        if pid in by_pid and by_pid[pid].readable
        for d in cross_check(pid, by_pid[pid].environ, log.env)
    ]


def process_findings(ev: Evidence) -> list[Finding]:
    """Every expectation a process that matters misses, and every lint error in one, as it has it."""
    found: list[Finding] = []
    if ev.processes is None:  # the rule set needs them: judge runs it only where they are
        return found
    for proc in targets(process_reports(ev.processes)):
        pid = proc.info.pid
        found += [_missed(pid, c) for c in proc.checks if c.status != ExpectationStatus.OK]
        found += [_lint_error(pid, f) for f in proc.lint or () if f["severity"] == "error"]
    return found


PROCESS_ENV = RuleSet("process environments", (process_findings,), needs=("processes",))


def env_check_report(ev: Evidence, snapshot: int | None = None) -> Report:
    """`env-check`: the process-environment rule set over the gathered processes, as a Report; exit 3
    when no process could be read. `snapshot`: the number of a --watch's check, in the title."""
    processes = ev.processes
    if processes is None:
        raise ValueError("env-check judges gathered processes: the evidence holds none")
    reports, found = process_reports(processes), disagreements(processes)
    report = judge(
        ev,
        (PROCESS_ENV,),
        kind="env-check",
        fails_at="error",
        answered=any(p.live for p in reports),
    )
    report.notes = all_notes(processes.notes, reports, found)
    report.document = document(processes, reports, found, report)
    report.rows = rows(reports, processes.show_all, table=False)
    headline = title(processes.root_pid, reports, report)
    report.sections = [
        Table(
            rows(reports, processes.show_all, table=True),
            title=f"snapshot {snapshot}: {headline}" if snapshot else headline,
            notes=report.notes,
            wide_rows=rows(reports, processes.show_all, table=True, wide=True),
        )
    ]
    report.data["processes"] = reports
    report.data["disagreements"] = found
    return report


def _missed(pid: int, c: _expect.ExpectationCheck) -> Finding:
    expected, actual = display_value(c.variable, c.expected), display_value(c.variable, c.actual)
    return Finding(
        rule="env-check",
        severity="error",
        confidence="high",
        title=f"pid {pid}: {c.variable} {c.status} (expected {expected!r}, has {actual!r})",
        detail=f"Process {pid} creates NCCL communicators (or is the job's readable process) and "
        f"has {c.variable} {c.status} against what was expected, as read from {c.source}.",
        evidence={"pid": pid, "variable": c.variable, "status": str(c.status), "source": c.source},
    )


def _lint_error(pid: int, lint: dict) -> Finding:
    return Finding(
        rule="env-check-lint",
        severity="error",
        confidence="high",
        title=f"pid {pid}: lint error: {lint['message']}",
        detail=f"Fix: {lint['fix']}" if lint.get("fix") else "",
        evidence={"pid": pid, "variable": lint["variable"], "code": lint["code"]},
    )


def _process_report(
    info: ProcessInfo,
    parent: ProcessInfo | None,
    expectations: Iterable[Expectation],
    log: ProcessNcclLog | None,
) -> ProcessReport:
    parent_env = parent.environ if parent is not None and parent.readable else None
    report = ProcessReport(info, parent_env, log=log)
    if not (info.readable and info.status not in ("zombie", "gone")):
        report.caveats.append(info.problem or "not readable")
        return report
    report.checks = _expect.check(info.environ, expectations, log.env if log else None)
    report.lint = _expect.lint(info.environ, log.nccl_version if log else None)
    report.caveats += _caveats(info, report.checks, log)
    return report


def _caveats(
    info: ProcessInfo, checks: list[_expect.ExpectationCheck], log: ProcessNcclLog | None
) -> list[str]:
    caveats = []
    if not info.environ:
        caveats.append(
            "its /proc environment block is empty: exec'd with no environment, or the process "
            "reused the block for a longer title (setproctitle can; vLLM and SGLang name their "
            "workers with it); use --log"
        )
    if info.forked_from is not None:
        caveats.append(
            f"forked without exec: /proc shows the environment pid {info.forked_from} was exec'd "
            "with, not what its os.environ held at the fork; this process may differ"
        )
    unsure = [
        c.variable for c in checks if c.status != ExpectationStatus.OK and c.source == "/proc"
    ]
    if unsure and log is None:
        caveats.append(
            f"{', '.join(unsure)}: judged from the exec-time environment; if the process sets it "
            "itself before creating its communicator NCCL still reads it (check with --log)"
        )
    return caveats
