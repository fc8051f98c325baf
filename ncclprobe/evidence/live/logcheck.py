"""What each process's NCCL log says it read (`env-check --log`, NCCL_DEBUG=INFO logs): NCCL's
`VAR set by environment to VALUE` lines are what it found when it looked, which /proc (the
environment at exec) may not show. `ncclprobe.diagnose.process_env.logcheck` compares the two.
Logs map to processes by the pid in each line's `host:pid:tid` prefix, or by the `%p` part of an
NCCL_DEBUG_FILE name such as `nccl.host.1234.log`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.values import as_logged
from ncclprobe.numbers import ascii_re, is_digits

_LINE_PID = ascii_re(r"^([^\s:\[\]]+):(\d+):\d+ \[\d+\]")
_FILE_PID = ascii_re(r"(?<![0-9])(\d{2,9})(?![0-9])")


@dataclass(frozen=True)
class ProcessNcclLog:
    pid: int
    path: str
    env: dict[str, str]  # variable -> first value NCCL reported
    nccl_version: str | None
    host: str | None = None  # the hostname NCCL printed; None when the log had no prefixed lines

    def on_this_host(self) -> bool:
        """Pids are per host: a multi-node log's lines from other nodes must not match local pids."""
        return self.host is None or _short_host(self.host) == _short_host(socket.gethostname())


def read_logs(paths: Iterable[str | Path]) -> list[ProcessNcclLog]:
    """What each log says of each process; UsageProblem for an unreadable or pid-less log."""
    try:
        from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log
        from ncclprobe.evidence.text import clean_line, read_text_file
    except ImportError:
        raise UsageProblem(
            "--log needs ncclprobe.evidence.nccl.nccl_log, which this build lacks"
        ) from None
    found = []
    for path in paths:
        text = read_text_file(path, "NCCL log")
        groups = lines_by_process(text, clean_line)
        if not groups:
            pid = pid_from_filename(path)
            if pid is None:
                raise UsageProblem(
                    f"--log {path}: no NCCL lines with a pid and no pid in the file name"
                )
            groups = {(None, pid): text.splitlines()}
        for (host, pid), lines in groups.items():
            parsed = parse_nccl_log("\n".join(lines))
            found.append(
                ProcessNcclLog(pid, str(path), dict(parsed.env), parsed.nccl_version, host)
            )
    return found


def lines_by_process(
    text: str, clean_line: Callable[[str], str]
) -> dict[tuple[str | None, int], list[str]]:
    """Lines grouped by the (host, pid) of their `host:pid:tid [dev]` prefix."""
    groups: dict[tuple[str | None, int], list[str]] = {}
    for line in text.splitlines():
        match = _LINE_PID.match(clean_line(line))
        if match:
            groups.setdefault((match.group(1), int(match.group(2))), []).append(line)
    return groups


def _short_host(name: str) -> str:
    return name.split(".", 1)[0]


def pid_from_filename(path: str | Path) -> int | None:
    """The pid in an NCCL_DEBUG_FILE name: the last all-digit dot-separated part (`%h.%p` and
    `%p.%h` alike, so host `gpu12` never wins), else the last run of digits (`nccl-4242.log`)."""
    name = Path(path).name
    parts = [part for part in name.split(".") if is_digits(part) and 2 <= len(part) <= 9]
    if parts:
        return int(parts[-1])
    found = _FILE_PID.findall(name)
    return int(found[-1]) if found else None


def normalise(name: str, value: str | None) -> str | None:
    """The spelling NCCL logs for a value, as NCCL parses it (`ncclprobe.nccl.values.as_logged`)."""
    return None if value is None else as_logged(name, value.strip())
