"""`env-check`'s evidence, gathered live: the job's process tree and environments from /proc, and the
NCCL logs given with `--log` (each line's pid and host tell whose it is)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ncclprobe.evidence.live.logcheck import ProcessNcclLog, read_logs
from ncclprobe.evidence.live.processes import Expectation, ProcessEvidence, merge
from ncclprobe.evidence.live.walk import ProcessInfo, walk


def gather_processes(
    pid: int,
    *,
    expectations: Iterable[Expectation] = (),
    log_paths: Iterable[str | Path] = (),
    show_all: bool = False,
) -> ProcessEvidence:
    """Walk `pid` and its descendants, read their NCCL logs. UsageProblem for a missing pid."""
    expected = merge(expectations)
    log_paths = list(log_paths)
    logs_read = read_logs(log_paths)
    logs = _logs_by_pid([item for item in logs_read if item.on_this_host()])
    infos = walk(pid)
    ev = ProcessEvidence(pid, infos, logs, expected, show_all)
    ev.notes = _notes(infos, logs, ev.by_pid()) + _other_hosts(logs_read)
    ev.notes += _known_bad(list(log_paths), logs_read)
    return ev


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


def _notes(
    infos: list[ProcessInfo], logs: dict[int, ProcessNcclLog], by_pid: dict[int, ProcessInfo]
) -> list[str]:
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
            hosts.setdefault(item.path, set()).add(str(item.host))  # not this host: one is named
    return [
        f"--log {path}: lines from host {', '.join(sorted(names))}, not this host; not cross-checked"
        for path, names in hosts.items()
    ]


def _known_bad(paths: list[str | Path], logs_read: list[ProcessNcclLog]) -> list[str]:
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
