"""Walk a process and its descendants: who they are, whether they loaded NCCL, which GPUs they use.

Processes come and go during a walk (a job's workers start seconds after launch, short helpers
exit), so every per-process read is allowed to fail: a process that exits mid-walk is reported
as gone, one owned by another user as unreadable, and the walk goes on. Only a root pid that does
not exist at all is a usage error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live.environ import EnvironUnreadable, read_environ
from ncclprobe.secrets import mask_argv

log = logging.getLogger("ncclprobe.env_check")

CMDLINE_CHARS = 48


@dataclass
class ProcessInfo:
    pid: int
    ppid: int | None
    depth: int  # 0 for the root of the walk
    command: str  # the command line, shortened for display
    status: str  # "running", "sleeping", ..., "zombie", "gone"
    role: str  # a guess: launcher, torchrun agent, spawn worker, ...
    readable: bool  # whether /proc/PID/environ could be read
    problem: str | None = None  # why not readable
    libnccl: str | None = None  # path of the mapped libnccl, if any
    maps_readable: bool = False
    gpus: list[int] | None = None  # GPU indices from NVML; None when NVML is unavailable
    forked_from: int | None = (
        None  # pid whose exec-time environment /proc shows (fork without exec)
    )
    environ: dict[str, str] = field(default_factory=dict, repr=False)  # raw: never serialised as is
    argv: list[str] = field(default_factory=list, repr=False)


def walk(root_pid: int) -> list[ProcessInfo]:
    """The root and every descendant, parents before children. UsageProblem if the root is absent."""
    if root_pid < 1:
        raise UsageProblem(f"--pid {root_pid} is not a process id (pids start at 1)")
    try:
        root = psutil.Process(root_pid)
    except psutil.NoSuchProcess:
        raise UsageProblem(f"no process with pid {root_pid}") from None
    except psutil.AccessDenied:
        raise UsageProblem(
            f"pid {root_pid} exists but can't be inspected (needs the same user or root)"
        ) from None
    gpu_map = gpu_processes()
    infos: dict[int, ProcessInfo] = {}
    for proc, depth in _tree(root, skip=os.getpid()):
        info = describe(proc, depth, gpu_map)
        infos[info.pid] = info
    for info in infos.values():
        _refine_role(info, infos.get(info.ppid) if info.ppid is not None else None)
    return list(infos.values())


def _tree(root: psutil.Process, skip: int) -> Iterator[tuple[psutil.Process, int]]:
    """Depth-first pairs (process, depth), parents first; `skip` (this checker) and its children left out."""
    stack = [(root, 0)]
    while stack:
        proc, depth = stack.pop()
        if proc.pid == skip and depth:
            continue
        yield proc, depth
        try:
            children = sorted(proc.children(), key=lambda p: p.pid, reverse=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            children = []
        stack.extend((child, depth + 1) for child in children)


def describe(proc: psutil.Process, depth: int, gpu_map: dict[int, list[int]] | None) -> ProcessInfo:
    pid = proc.pid
    argv, status, ppid = _basic(proc)
    info = ProcessInfo(
        pid=pid,
        ppid=ppid,
        depth=depth,
        command=_short(argv, pid),
        status=status,
        role="process",
        readable=False,
        argv=argv,
    )
    if status in ("zombie", "gone"):
        info.problem = (
            "zombie: exited, not yet reaped; nothing left to read"
            if status == "zombie"
            else "exited during the walk"
        )
        info.role = status
        return info
    try:
        info.environ = read_environ(pid)
        info.readable = True
    except EnvironUnreadable as exc:
        info.problem = str(exc)
        if "exited" in str(exc):
            info.status = "gone"
    info.libnccl, info.maps_readable = mapped_libnccl(pid)
    info.gpus = gpu_map.get(pid, []) if gpu_map is not None else None
    info.role = guess_role(argv)
    _recheck(proc, info)
    return info


def _recheck(proc: psutil.Process, info: ProcessInfo) -> None:
    """Drop what was read if the process died meanwhile: a zombie's environ reads as empty, and
    a reused pid would lend us a stranger's environment."""
    try:
        alive = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        alive = False
    if not alive:
        info.status, info.role, info.readable, info.environ = "gone", "gone", False, {}
        info.libnccl, info.problem = None, "exited during the walk"


def _basic(proc: psutil.Process) -> tuple[list[str], str, int | None]:
    try:
        with proc.oneshot():
            status = proc.status()
            ppid = proc.ppid()
            argv = proc.cmdline() if status != psutil.STATUS_ZOMBIE else []
        return argv, str(status), ppid
    except psutil.ZombieProcess:
        return [], "zombie", _safe_ppid(proc)
    except psutil.NoSuchProcess:
        return [], "gone", None
    except psutil.AccessDenied:
        return [], "unreadable", _safe_ppid(proc)


def _safe_ppid(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def _short(argv: list[str], pid: int) -> str:
    if not argv:
        return f"[pid {pid}]"
    # whole, masked: JSON and CSV are complete (the table shows `short_command`)
    return " ".join(" ".join(mask_argv(argv)).split())  # setproctitle pads titles with spaces


def short_command(command: str) -> str:
    """A command line for a table cell: every path as its last part (`/opt/venv/bin/python` ->
    `python`), cut after whole words to CMDLINE_CHARS. A table wraps at spaces: a path split
    mid-word could not be read or pasted."""
    words = [w.rsplit("/", 1)[-1] if "/" in w.rstrip("/") else w for w in command.split()]
    text = " ".join(words)
    if len(text) <= CMDLINE_CHARS:
        return text
    return text[: CMDLINE_CHARS - 3].rsplit(" ", 1)[0] + " ..."


def mapped_libnccl(pid: int) -> tuple[str | None, bool]:
    """(path of a mapped libnccl or None, whether /proc/PID/maps could be read)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                path = line.rstrip("\n").split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                if "/libnccl" in path and ".so" in path:
                    return path.strip(), True
    except OSError:
        return None, False
    return None, True


def guess_role(argv: list[str]) -> str:
    """A role from the command line alone; `_refine_role` adds what the parent tells."""
    text = " ".join(argv)
    rules = (
        ("multiprocessing.forkserver", "multiprocessing forkserver"),
        ("multiprocessing.resource_tracker", "multiprocessing resource tracker"),
        ("multiprocessing.spawn", "multiprocessing spawn worker"),
        ("torch.distributed.run", "torchrun agent"),
        ("torch.distributed.launch", "torchrun agent"),
        ("ncclprobe.worker", "ncclprobe worker"),
        ("ray::", "ray worker"),
        ("VLLM::", "vLLM process"),  # vLLM and SGLang rename their workers (setproctitle)
        ("sglang::", "SGLang process"),
    )
    for needle, role in rules:
        if needle in text:
            return role
    programs = [
        word.rsplit("/", 1)[-1] for word in argv[:2]
    ]  # `torchrun ...` or `python .../torchrun ...`
    if "torchrun" in programs:
        return "torchrun agent"
    if any(p in ("mpirun", "mpiexec", "srun", "deepspeed", "accelerate") for p in programs):
        return "launcher"
    return "process"


def _refine_role(info: ProcessInfo, parent: ProcessInfo | None) -> None:
    if info.status in ("zombie", "gone") or parent is None:
        return
    if info.argv and info.argv == parent.argv:
        # fork without exec: /proc shows the environment the ancestor was exec'd with
        info.forked_from = parent.forked_from or parent.pid
        info.role = (
            "forkserver worker" if parent.role == "multiprocessing forkserver" else "forked child"
        )
    elif parent.role == "torchrun agent" and info.role == "process":
        info.role = "torchrun worker"
    if parent.role == "process" and parent.depth == 0:
        parent.role = "launcher"


def gpu_processes() -> dict[int, list[int]] | None:
    """{pid: [GPU index, ...]} from NVML, or None when NVML (nvidia-ml-py) is not usable here."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVML raises its own error types; no driver means no GPU column
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        return _nvml_map(pynvml)
    finally:
        pynvml.nvmlShutdown()


def _nvml_map(pynvml: Any) -> dict[int, list[int]]:
    mapping: dict[int, list[int]] = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for getter in (
            pynvml.nvmlDeviceGetComputeRunningProcesses,
            pynvml.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            try:
                running = getter(handle)
            except Exception:  # not supported on this device or driver
                continue
            for process in running:
                gpus = mapping.setdefault(process.pid, [])
                if index not in gpus:
                    gpus.append(index)
    return mapping
