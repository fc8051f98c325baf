"""The job's process tree, watched while it runs: every process's environment read as it appears.

A worker's environment is read from /proc the first time the watch sees it (`evidence.live.walk`:
/proc/PID/environ is the block the kernel filled at exec, so reading it early or late gives the
same answer; reading it at all needs the process alive, which is why the tree is watched, not
walked once at the end). Whether it loaded NCCL is looked at again on every pass until it has:
NCCL is loaded when the job first uses it, long after exec. Raw environments stay in memory; what
is written (`observed`) is masked by the one policy.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import psutil

from ncclprobe.evidence.live.walk import ProcessInfo, describe, mapped_libnccl
from ncclprobe.secrets import display_value, visible_env

PYTHON_NAMES = ("python", "python3", "pypy", "pypy3")


@dataclass
class Seen:
    info: ProcessInfo
    first_seen: float
    gone: float | None = None
    libnccl: str | None = None


@dataclass
class TreeWatch:
    root: int
    started: float = field(default_factory=time.monotonic)
    seen: dict[int, Seen] = field(default_factory=dict)

    def poll(self) -> list[int]:
        """One pass over the tree: new processes described, NCCL looked for, exits noted. Returns
        the pids alive now."""
        try:
            root = psutil.Process(self.root)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            procs = []
        alive = []
        now = time.monotonic()
        depth = {self.root: 0}
        for proc in procs:
            pid = proc.pid
            if pid == os.getpid():
                continue
            alive.append(pid)
            if pid not in self.seen:
                info = describe(
                    proc, depth.get(_ppid(proc) or 0, 0) + 1 if pid != self.root else 0, None
                )
                if info.status in ("gone", "zombie"):
                    continue
                self.seen[pid] = Seen(info, now - self.started, libnccl=info.libnccl)
            entry = self.seen[pid]
            depth[pid] = entry.info.depth
            if entry.libnccl is None:
                entry.libnccl = mapped_libnccl(pid)[0]
        for pid, entry in self.seen.items():
            if entry.gone is None and pid not in alive:
                entry.gone = now - self.started
        return alive

    def alive(self) -> list[int]:
        return [pid for pid, e in self.seen.items() if e.gone is None]


def _ppid(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def is_python(argv: list[str]) -> bool:
    program = os.path.basename(argv[0]) if argv else ""
    return program.startswith(PYTHON_NAMES) or program in ("torchrun",)


def observed(
    watch: TreeWatch,
    settings: Mapping[str, str],
    added: Mapping[str, str],
    injob: Mapping[int, dict],
    nccl_read: Mapping[int, Mapping[str, str]],
) -> list[dict]:
    """Every process seen, masked, with the job's settings it lacked or had otherwise, the capture's
    variables that never reached it, and what its NCCL log says it read."""
    rows = []
    for pid, entry in sorted(watch.seen.items(), key=lambda item: item[1].first_seen):
        info = entry.info
        env = info.environ
        empty = info.readable and not env
        lacking = info.readable and not empty
        record = injob.get(pid) or {}
        rows.append(
            {
                "pid": pid,
                "ppid": info.ppid,
                "command": info.command,
                "role": info.role,
                "python": is_python(info.argv),
                "libnccl": entry.libnccl,
                "injob": pid in injob,
                "rank": record.get("rank") if record.get("rank") is not None else _rank(env),
                "readable": info.readable,
                "empty_block": empty,
                "problem": info.problem,
                "first_seen_s": round(entry.first_seen, 3),
                "gone_s": round(entry.gone, 3) if entry.gone is not None else None,
                "missing": sorted(k for k in settings if lacking and k not in env),
                "changed": {
                    k: {"job": display_value(k, v), "here": display_value(k, env[k])}
                    for k, v in sorted(settings.items())
                    if lacking and k in env and env[k] != v
                },
                "capture_missing": sorted(
                    k for k in added if lacking and k != "PYTHONPATH" and k not in env
                )
                + (["PYTHONPATH"] if lacking and _lost_hook(env, added) else []),
                "nccl_read": {
                    k: display_value(k, v) for k, v in (nccl_read.get(pid) or {}).items()
                },
                "env": visible_env(env),
                "profiler": _spans(record.get("profiler")),
            }
        )
    return rows


def _spans(spans: object) -> list[dict[str, float]]:
    """The in-job profiler's spans of this process, as it recorded them (wall-clock seconds)."""
    if not isinstance(spans, list):
        return []
    keys = ("start", "started", "stop", "written")
    return [
        {k: float(s[k]) for k in keys if isinstance(s.get(k), (int, float))}
        for s in spans
        if isinstance(s, dict) and isinstance(s.get("start"), (int, float))
    ]


def _lost_hook(env: Mapping[str, str], added: Mapping[str, str]) -> bool:
    hook = (added.get("PYTHONPATH") or "").split(os.pathsep)[0]
    return bool(hook) and hook not in (env.get("PYTHONPATH") or "").split(os.pathsep)


def _rank(env: Mapping[str, str]) -> int | None:
    value = env.get("RANK", "")
    return int(value) if value.isascii() and value.isdigit() else None
