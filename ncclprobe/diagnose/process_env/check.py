"""env-check: which NCCL settings each process of a running job really has.

`env_check(pid, ...)` walks the process tree (`walk`), reads each environment from /proc
(`environ`, secrets masked), checks expectations and lint (`expect`), cross-checks NCCL's own
logs (`logcheck`) and returns an `EnvCheckResult` (`report`) that the CLI renders.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ncclprobe.diagnose.process_env import expect as _expect
from ncclprobe.diagnose.process_env.report import EnvCheckResult, ProcessReport
from ncclprobe.evidence.live.env_check_document import ExpectationStatus
from ncclprobe.evidence.live.logcheck import ProcessNcclLog, cross_check, read_logs
from ncclprobe.evidence.live.walk import ProcessInfo, walk

__all__ = ["env_check", "EnvCheckResult"]


def env_check(
    pid: int,
    *,
    expectations: Iterable[_expect.Expectation] = (),
    log_paths: Iterable[str | Path] = (),
    show_all: bool = False,
) -> EnvCheckResult:
    """Walk `pid` and its descendants and judge their settings. UsageProblem for a missing pid."""
    expectations = _expect.merge(expectations)
    log_paths = list(log_paths)
    logs_read = read_logs(log_paths)
    logs = _logs_by_pid([item for item in logs_read if item.on_this_host()])
    infos = walk(pid)
    by_pid = {info.pid: info for info in infos}
    reports = [
        _process_report(info, by_pid.get(info.ppid), expectations, logs.get(info.pid))
        for info in infos
    ]
    disagreements = [
        d
        for pid_, log in logs.items()
        if pid_ in by_pid and by_pid[pid_].readable
        for d in cross_check(pid_, by_pid[pid_].environ, log.env)
    ]
    result = EnvCheckResult(pid, reports, expectations, disagreements, show_all=show_all)
    result.notes += _notes(infos, logs, by_pid)
    result.notes += _other_hosts(logs_read)
    result.notes += _known_bad(log_paths, logs_read)
    return result


def _known_bad(paths, logs_read: list[ProcessNcclLog]) -> list[str]:
    """The NCCL releases the processes' logs show, against the known-bad table (`nccl.known_bad`),
    with the GPUs and the failure lines the logs themselves name."""
    from ncclprobe.evidence.nccl.known_bad_scan import scan
    from ncclprobe.nccl.known_bad import describe, matching

    if not logs_read:
        return []
    found = scan(paths)
    notes = []
    for version in sorted({log.nccl_version for log in logs_read if log.nccl_version}):
        read = next((log.env for log in logs_read if log.nccl_version == version), {})
        for match in matching(version, found.capabilities, lines=found.lines, read=read):
            notes.append(f"known-bad {match.severity}: {describe(match)}")
    return notes


def _process_report(
    info: ProcessInfo, parent: ProcessInfo | None, expectations, log: ProcessNcclLog | None
):
    parent_env = parent.environ if parent is not None and parent.readable else None
    report = ProcessReport(info, parent_env, log=log)
    if not (info.readable and info.status not in ("zombie", "gone")):
        report.caveats.append(info.problem or "not readable")
        return report
    report.checks = _expect.check(info.environ, expectations, log.env if log else None)
    report.lint = _expect.lint(info.environ, log.nccl_version if log else None)
    report.caveats += _caveats(info, report.checks, log)
    return report


def _caveats(info: ProcessInfo, checks, log) -> list[str]:
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


def _logs_by_pid(logs_read: list[ProcessNcclLog]) -> dict[int, ProcessNcclLog]:
    merged: dict[int, ProcessNcclLog] = {}
    for item in logs_read:
        if item.pid in merged:  # several files for one pid: the first value NCCL reported wins
            earlier = merged[item.pid]
            env = {**item.env, **earlier.env}
            item = ProcessNcclLog(
                item.pid,
                f"{earlier.path}, {item.path}",
                env,
                earlier.nccl_version or item.nccl_version,
                earlier.host,
            )
        merged[item.pid] = item
    return merged


def _notes(infos, logs, by_pid) -> list[str]:
    notes = []
    if infos and all(info.gpus is None for info in infos):
        notes.append("GPU column needs NVML (pip install nvidia-ml-py, and an NVIDIA driver)")
    notes += [
        f"--log {log.path}: pid {pid} is not in this process tree; not cross-checked"
        for pid, log in logs.items()
        if pid not in by_pid
    ]
    return notes


def _other_hosts(logs_read: list[ProcessNcclLog]) -> list[str]:
    hosts: dict[str, set[str]] = {}
    for item in logs_read:
        if not item.on_this_host():
            hosts.setdefault(item.path, set()).add(item.host)
    return [
        f"--log {path}: lines from host {', '.join(sorted(names))}, not this host; not cross-checked"
        for path, names in hosts.items()
    ]
