"""Run one launch across the nodes: start its command lines here, watch them, end them.

Each command (one srun or mpirun, or one per host under torchrun) runs in its own session with
stdout and stderr in `<log dir>/<label>.log`, the per-node log of what the launcher and the node
said. The launch is over when every command has exited; it fails when one exits non-zero (the
others get `GRACE_S` to end on their own, as the peers of a failed rank do, then are ended) and it
hangs when nothing it writes changes for `timeout_s` (`activity`: the newest change among the files
the ranks write to the shared directory, and these logs), the start included.

Ending a command ends its session: SIGTERM, then SIGKILL after `GRACE_S`. srun and mpirun pass the
signal to their tasks on every node; a `--node-exec` command ends on the far side only where its
template makes it so (`ssh -tt`, whose remote processes get SIGHUP with the connection).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe import interrupts
from ncclprobe.hosts.launchers import NodeCommand
from ncclprobe.launch import describe_code, error_summary
from ncclprobe.secrets import mask_argv
from ncclprobe.textenum import TextEnum

log = logging.getLogger("ncclprobe.hosts")

POLL_S = 0.1
GRACE_S = 5.0
TAIL_BYTES = 4000


class LaunchStatus(TextEnum):
    OK = "ok"  # every command exited 0
    ERROR = "error"  # a command exited non-zero or could not start
    HANG = "hang"  # nothing changed for timeout_s: ended


@dataclass
class LaunchOutcome:
    status: LaunchStatus
    reason: str | None
    returncodes: dict[str, int | None] = field(default_factory=dict)  # by label
    logs: dict[str, str] = field(default_factory=dict)  # label -> its log file
    wall_s: float = 0.0

    def to_json(self) -> dict:
        return {
            "status": str(self.status),
            "reason": self.reason,
            "returncodes": dict(self.returncodes),
            "logs": dict(self.logs),
            "wall_s": round(self.wall_s, 3),
        }


def run_launch(
    commands: list[NodeCommand],
    *,
    log_dir: Path,
    timeout_s: float,
    activity: Callable[[], float] = lambda: 0.0,
) -> LaunchOutcome:
    """Start every command, wait for all of them (see the module's docstring), end what is left."""
    log_dir.mkdir(parents=True, exist_ok=True)
    started, procs = time.monotonic(), {}
    logs = {c.label: str(log_dir / f"{_safe(c.label)}.log") for c in commands}
    try:
        for command in commands:
            log.debug("starting %s: %s", command.label, " ".join(mask_argv(command.argv)))
            with interrupts.held():  # a command started but not yet in `procs` would live on
                procs[command.label] = _start(command, Path(logs[command.label]))
        status, reason = _watch(procs, logs, timeout_s, activity)
    except FileNotFoundError as exc:
        status, reason = LaunchStatus.ERROR, f"cannot start {exc.filename!r}: not found here"
    finally:
        for proc in procs.values():
            _end(proc)
    return LaunchOutcome(
        status,
        reason,
        {label: proc.returncode for label, proc in procs.items()},
        logs,
        time.monotonic() - started,
    )


def _start(command: NodeCommand, log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            list(command.argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _watch(procs, logs, timeout_s: float, activity) -> tuple[LaunchStatus, str | None]:
    last_change, seen = time.monotonic(), _newest(logs, activity)
    failed_at = None
    while True:
        codes = {label: proc.poll() for label, proc in procs.items()}
        now = time.monotonic()
        if all(code == 0 for code in codes.values()):
            return LaunchStatus.OK, None
        bad = {label: code for label, code in codes.items() if code not in (None, 0)}
        if bad:
            failed_at = failed_at or now
            if all(code is not None for code in codes.values()) or now - failed_at > GRACE_S:
                return LaunchStatus.ERROR, _failure(bad, logs)
        newest = _newest(logs, activity)
        if newest != seen:
            seen, last_change = newest, now
        elif now - last_change > timeout_s:
            quiet = ", ".join(label for label, code in codes.items() if code is None)
            return LaunchStatus.HANG, (
                f"nothing changed for {timeout_s:g} s (still running: {quiet}); ended"
            )
        time.sleep(POLL_S)


def newest_change(directory: Path) -> float:
    """The newest change among the files in `directory` (what the ranks write: messages, NCCL logs,
    env-check documents), as an `activity` for `run_launch`; 0.0 where nothing is there yet."""
    newest = 0.0
    for path in directory.glob("*"):
        try:
            newest = max(newest, os.stat(path).st_mtime)
        except OSError:
            continue
    return newest


def _newest(logs: dict[str, str], activity) -> float:
    times = [activity()]
    for path in logs.values():
        try:
            times.append(os.stat(path).st_mtime)
        except OSError:
            pass
    return max(times)


def _failure(bad: dict[str, int], logs: dict[str, str]) -> str:
    parts = []
    for label, code in sorted(bad.items()):
        what = (
            f"was killed by {describe_code(code)}"
            if code < 0
            else f"exited with {describe_code(code)}"
        )
        summary = problem_line(tail(logs[label]))
        parts.append(f"{label} {what}" + (f" ({summary})" if summary else ""))
    folder = Path(next(iter(logs.values()))).parent
    return "; ".join(parts) + f"; each command's output is in {folder}/"


_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b")
_PROBLEM = re.compile(r"\b(?:error|fatal|cannot|can't|failed|refused|unable|not found)\b", re.I)
_BANNER = set("-=*#_~ ")


def problem_line(text: str, limit: int = 300) -> str:
    """The line of a launcher's output that says what went wrong: a Python exception's last line
    (a rank's, torchrun's), else the first line that names a problem (`srun: error: ...`, Open MPI's
    first line before its banner), else the last line; banners of dashes skipped, masked."""
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not set(line.strip()) <= _BANNER
    ]
    exceptions = [line for line in lines if _EXCEPTION.match(line)]
    if exceptions:
        return error_summary(exceptions[-1], limit)
    chosen = next((line for line in lines if _PROBLEM.search(line)), lines[-1] if lines else "")
    return error_summary(chosen, limit)


def tail(path: str, size: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
    log.warning("launch command pid %d did not exit after SIGKILL", proc.pid)


def _safe(label: str) -> str:
    """A label as a file name: a host name or address, kept readable."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in label) or "node"
