"""The launcher: start one worker process per rank, rendezvous them, collect their messages, and
kill the whole pool when it hangs or a rank crashes.

Every multi-rank piece of ncclprobe (the sweep, the engine, the probes) runs through `run_pool`.

Why subprocesses and not multiprocessing: each worker is a fresh interpreter (like
multiprocessing's spawn, which SGLang and vLLM use for TP workers) whose environment is given
explicitly at exec, so what NCCL reads is exactly what the pool asked for; and each worker leads
its own process group, so a hung NCCL call is ended with killpg, children included.

Rendezvous: the launcher hosts torch's TCPStore on 127.0.0.1 with a port the OS picks (no race
for a free port); workers connect to it as clients. Under torchrun the same worker code uses
torchrun's env:// rendezvous instead (see `ncclprobe.worker`).

Messages: each rank appends JSON lines to its own file in the run directory, flushed per line;
the launcher tails them. A message from any rank resets the silence watchdog, so `timeout_s` is
the longest a pool may go without progress, not a budget for the whole pool. The same bound holds
from the start, before the first message: a worker that hangs while starting is killed after
`timeout_s` like any other. Before a rank's first message, progress is also CPU time it spends
(an interpreter importing torch on a busy machine is slow, not hung; a hung or stopped start spends
none); `ncclprobe.pool_progress` keeps that account and names the ranks that held a hung pool up.

Faults are attributed to the rank that caused them: every rank's exit status is read before one is
blamed, and a rank killed by a signal, or the first to exit, is named before the peers that merely
noticed it ("Connection reset by peer"). The reason is one line (the failing rank's last error
line, never its traceback); the full stderr tails are in the outcome and logged at -v.

The run directory is made by `ncclprobe.tempdirs`, so one left by a SIGKILLed launcher is removed
by the next run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe import interrupts, tempdirs
from ncclprobe.pool_progress import Progress
from ncclprobe.secrets import mask_text
from ncclprobe.textenum import TextEnum

log = logging.getLogger("ncclprobe.launch")

POLL_S = 0.05
KILL_GRACE_S = 0.5  # after one rank fails, how long the others get to exit on their own
STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True, kw_only=True)
class PoolSpec:
    nranks: int  # worker processes, one per rank
    backend: str  # "nccl" (one GPU per rank) or "gloo" (CPU)
    entry: str  # "module:function" called with a WorkerContext
    payload: Mapping = field(default_factory=dict)  # JSON-able input for the entry
    env: Mapping[str, str] = field(
        default_factory=dict
    )  # set in every worker's environment at exec
    unset: tuple[str, ...] = ()  # removed from the inherited environment
    rank_env: Mapping[str, str] = field(
        default_factory=dict
    )  # per-rank values: "{rank}" is replaced
    timeout_s: float = 120.0  # longest silence (no message from any rank), seconds,
    # the start (interpreter, torch import, rendezvous) included
    gpu: int | None = None  # NCCL: every rank on this GPU (None: GPU = local rank);
    # NCCL refuses that unless the ranks seem to be on
    # different hosts (a distinct NCCL_HOSTID per rank)

    def __post_init__(self):
        if self.nranks < 1:
            raise ValueError(f"a pool needs at least one rank, got {self.nranks}")
        if self.backend not in ("nccl", "gloo"):
            raise ValueError(f"backend must be nccl or gloo, got {self.backend!r}")
        if not (0 < self.timeout_s < float("inf")):  # also refuses nan, which compares false with 0
            raise ValueError(f"timeout_s must be a positive finite number, got {self.timeout_s}")


class PoolStatus(TextEnum):
    OK = "ok"  # every rank exited 0
    HANG = "hang"  # silent for timeout_s (its start included): killed
    ERROR = "error"  # a rank exited non-zero or was killed: the others were killed


@dataclass
class PoolOutcome:
    status: PoolStatus
    reason: str | None  # why, when not ok
    messages: list[dict]  # every message, in arrival order, each with "rank"
    returncodes: dict[int, int | None]
    stderr_tails: dict[int, str]
    wall_s: float
    pids: dict[int, int]

    def of_kind(self, kind: str) -> list[dict]:
        return [m for m in self.messages if m.get("kind") == kind]


def worker_env(spec: PoolSpec, rank: int, run_dir: Path, store_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in spec.unset}
    env.update(spec.env)
    env.update(
        {key: template.replace("{rank}", str(rank)) for key, template in spec.rank_env.items()}
    )
    env.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(spec.nranks),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(spec.nranks),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(store_port),
            "NCCLPROBE_STORE_PORT": str(store_port),
            "NCCLPROBE_RUN_DIR": str(run_dir),
            "NCCLPROBE_BACKEND": spec.backend,
            "NCCLPROBE_ENTRY": spec.entry,
            "NCCLPROBE_PARENT_PID": str(
                os.getpid()
            ),  # workers die with the launcher (worker.die_with_launcher)
            "PYTHONUNBUFFERED": "1",
        }
    )
    if spec.gpu is not None:
        env["NCCLPROBE_GPU"] = str(spec.gpu)
    # the worker must import this ncclprobe, also when it runs from a source checkout
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def run_pool(spec: PoolSpec, on_message: Callable[[dict], None] | None = None) -> PoolOutcome:
    """Run `spec.entry` on `spec.nranks` worker processes until all exit, one fails, or they go silent."""
    from torch.distributed import TCPStore  # the parent hosts the rendezvous store

    _check_thread_override()
    run_dir = tempdirs.make("ncclprobe-pool-")
    procs: dict[int, subprocess.Popen] = {}
    try:  # from here on, whatever happens (Ctrl-C during the store's start too), the run dir goes
        (run_dir / "payload.json").write_text(json.dumps(dict(spec.payload)))
        store = TCPStore("127.0.0.1", 0, spec.nranks, is_master=True, wait_for_workers=False)
        started = time.monotonic()
        try:  # filled rank by rank: ranks already started are killed even when a later start fails
            for rank in range(spec.nranks):
                with interrupts.held():  # a worker started but not yet in `procs` would live on
                    procs[rank] = _start(spec, rank, run_dir, store.port)
            status, reason, messages = _watch(spec, procs, run_dir, on_message)
        finally:
            for proc in procs.values():
                _kill_group(proc)
            del store
        return _outcome(status, reason, messages, procs, run_dir, time.monotonic() - started)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _check_thread_override() -> None:
    """A bad NCCLPROBE_WORKER_THREADS is the user's mistake: one line (UsageProblem) before any rank starts."""
    from ncclprobe.worker import worker_threads

    worker_threads(1)


def _outcome(status, reason, messages, procs, run_dir: Path, wall_s: float) -> PoolOutcome:
    outcome = PoolOutcome(
        status=status,
        reason=reason,
        messages=messages,
        returncodes={rank: proc.returncode for rank, proc in procs.items()},
        stderr_tails={rank: _tail(run_dir / f"rank{rank}.err") for rank in procs},
        wall_s=wall_s,
        pids={rank: proc.pid for rank, proc in procs.items()},
    )
    if status is not PoolStatus.OK:
        for rank, tail in sorted(outcome.stderr_tails.items()):
            if tail:
                log.debug("rank %d stderr (last %d characters):\n%s", rank, STDERR_TAIL_CHARS, tail)
    return outcome


def _start(spec: PoolSpec, rank: int, run_dir: Path, port: int) -> subprocess.Popen:
    out = open(run_dir / f"rank{rank}.out", "wb")
    err = open(run_dir / f"rank{rank}.err", "wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "ncclprobe.worker"],
            env=worker_env(spec, rank, run_dir, port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    finally:
        out.close()
        err.close()


def _watch(spec, procs, run_dir, on_message) -> tuple[PoolStatus, str | None, list[dict]]:
    inbox = _Inbox(procs, run_dir, on_message)
    progress = Progress(procs, time.monotonic())
    failed_at = None
    exited_at: dict[int, float] = {}
    while True:
        senders = inbox.collect()
        codes = {rank: proc.poll() for rank, proc in procs.items()}
        now = time.monotonic()
        progress.sample(senders, now)
        for rank, code in codes.items():
            if code is not None:
                exited_at.setdefault(rank, now)
        if all(code == 0 for code in codes.values()):
            inbox.collect()
            return PoolStatus.OK, None, inbox.messages
        bad = {rank: code for rank, code in codes.items() if code not in (None, 0)}
        if bad:
            failed_at = failed_at or now
            if all(code is not None for code in codes.values()) or now - failed_at > KILL_GRACE_S:
                inbox.collect()
                return PoolStatus.ERROR, failure_reason(bad, exited_at, run_dir), inbox.messages
        if progress.silent_for(now) > spec.timeout_s:
            inbox.collect()
            return PoolStatus.HANG, progress.hang_reason(spec.timeout_s), inbox.messages
        time.sleep(POLL_S)


class _Inbox:
    """Every rank's message file read as one stream: each new line becomes a message carrying its
    rank, kept in arrival order and handed to `on_message` as it arrives."""

    def __init__(self, procs, run_dir: Path, on_message: Callable[[dict], None] | None):
        self.readers = {rank: _LineReader(run_dir / f"rank{rank}.jsonl") for rank in procs}
        self.on_message = on_message
        self.messages: list[dict] = []

    def collect(self) -> set[int]:
        """Take in what every rank appended since the last call; the ranks that sent something."""
        senders = set()
        for rank, reader in self.readers.items():
            for line in reader.new_lines():
                message = {"rank": rank, **line}
                self.messages.append(message)
                senders.add(rank)
                if self.on_message:
                    self.on_message(message)
        return senders


def failure_reason(bad: dict[int, int], exited_at: dict[int, float], run_dir: Path) -> str:
    """One line naming the rank that failed first (a rank killed by a signal before one that exited
    with an error at the same moment: the latter usually noticed the former), then the others."""
    order = sorted(bad, key=lambda r: (exited_at.get(r, float("inf")), bad[r] >= 0, r))
    first, others = order[0], order[1:]
    text = f"rank {first} {_died(bad[first])}" + _error_of(run_dir, first)
    if others:
        text += "; then " + ", ".join(
            f"rank {r} {_died(bad[r])}" + _error_of(run_dir, r) for r in others
        )
    return text


def _died(code: int) -> str:
    return (
        f"was killed by {describe_code(code)}" if code < 0 else f"exited with {describe_code(code)}"
    )


def _error_of(run_dir: Path, rank: int) -> str:
    summary = error_summary(_tail(run_dir / f"rank{rank}.err"))
    return f" ({summary})" if summary else ""


_ERROR_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault)|[A-Za-z_][\w.]*Error\b)"
    r"(?::.*)?$"
)


def error_summary(stderr: str, limit: int = 300) -> str:
    """The line that says what went wrong (`RuntimeError: ...`), never traceback frames; empty when
    the stream holds none. Masked (`ncclprobe.secrets`): it becomes a result's reason, written to
    results files and printed, and an exception may quote the worker's arguments or a URL."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    chosen = next((line for line in reversed(lines) if _ERROR_LINE.match(line)), None)
    if chosen is None:
        chosen = next(
            (
                line
                for line in reversed(lines)
                if not line.startswith(("File ", "Traceback", "^", "~"))
                and not line.endswith(("^", "~"))
            ),
            "",
        )
    chosen = mask_text(chosen)
    return chosen if len(chosen) <= limit else chosen[: limit - 3] + "..."


def describe_code(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker leads its own group: children go too
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("worker pid %d did not exit after SIGKILL", proc.pid)


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-STDERR_TAIL_CHARS:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


class _LineReader:
    """Reads complete JSON lines appended to a file since the last call; a partial line waits."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, b""

    def new_lines(self) -> list[dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self.partial + chunk
        *complete, self.partial = data.split(b"\n")
        out = []
        for raw in complete:
            if raw.strip():
                try:
                    out.append(json.loads(raw))
                except json.JSONDecodeError:
                    out.append({"kind": "garbled", "text": raw.decode("utf-8", "replace")[:200]})
        return out
