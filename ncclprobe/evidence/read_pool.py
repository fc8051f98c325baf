"""Read many input files in worker processes, one file at a time, each under a memory and a CPU cap.

Why workers: a job of 1,024 ranks leaves 1,024 dumps or traces; reading them in parallel, each
reduced in its worker to a compact table, keeps the wall time near (files / cores) and the parent's
memory to the tables. Why caps: some inputs cost what no byte cap bounds (a pickle's memo index, a
tuple hashed 2**30 times: `evidence.hang.safe_pickle`). The worker caps its own address space
(RLIMIT_AS, above what it already maps) and CPU time (RLIMIT_CPU, above what it already spent)
before each file, so an allocation past the budget fails with MemoryError, and a file that spins
is stopped by the kernel (SIGXCPU). The parent names each such file with why, starts a fresh
worker, and goes on with the others. No core file is written, and Ctrl-C is the parent's alone.

`map_files(fn, items, limits)` returns one `Outcome` per item, in order: `Read(value)`, what
`fn(item)` returned, or `Failed(problem)`, the one-line reason it gave none. `fn` must be a
module-level function; what it returns travels back pickled, so it must be ncclprobe's own
records, built from checked values.
Workers fork from the parent: cheap, and they run only this module's loop and the reader (a fork
server or spawn would import the user's `__main__` again in every worker). A forked worker may also
fill the free memory its parent's heap already maps, which no address-space cap sees: small in the
CLI's own process, which reads nothing before the pool, but a long-lived caller (a test session
thousands of tests in held a million empty sets so) gets that much more.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkContext
from typing import Generic, TypeVar

from ncclprobe.errors import UsageProblem

MIB = 1 << 20
MAX_WORKERS = 8
WALL_FACTOR = 3  # a worker that spent no CPU for this many times its CPU cap (plus 2 s) is stopped:
# a worker blocked (a FIFO) spends no CPU at all, while one that spins meets its CPU cap. A worker
# that is merely waiting its turn on a loaded host keeps spending CPU, so it is never stopped for it


@dataclass(frozen=True)
class Limits:
    memory_bytes: int  # what the worker may map beyond its own size while reading the file
    cpu_s: int  # CPU seconds for the file


Item = TypeVar("Item")
Value = TypeVar("Value")


@dataclass(frozen=True)
class Read(Generic[Value]):
    """What `fn` returned for an item."""

    value: Value


@dataclass(frozen=True)
class Failed:
    """Why an item gave no value: a refusal, a cap reached, a crash."""

    problem: str


Outcome = Read[Value] | Failed


def workers_for(count: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(count, cores, MAX_WORKERS))


def map_files(
    fn: Callable[[Item], Value],
    items: Sequence[Item],
    limits: Callable[[Item], Limits],
    workers: int | None = None,
) -> list[Outcome[Value]]:
    """`fn(item)` for every item in capped workers; see the module docstring."""
    if not items:
        return []
    ctx = multiprocessing.get_context("fork")
    todo = list(enumerate(items))[::-1]
    results: dict[int, Outcome[Value]] = {}
    pool = [_Worker(ctx, fn) for _ in range(workers or workers_for(len(items)))]
    try:
        for w in pool:
            _give(w, todo, limits)
        while any(w.busy is not None for w in pool):
            ready = wait(
                [x for w in pool if w.busy is not None for x in (w.conn, w.process.sentinel)],
                timeout=1,
            )
            for w in list(pool):
                busy = w.busy
                if busy is None:
                    continue
                if w.conn in ready or w.process.sentinel in ready:
                    index, outcome, keep = w.collect()
                    results[index] = outcome
                    if not keep:
                        w.stop()
                        pool[pool.index(w)] = w = _Worker(ctx, fn)
                    _give(w, todo, limits)
                elif w.overdue():
                    index = busy[0]
                    w.stop()
                    results[index] = Failed(
                        f"its reader spent no CPU for {w.wall_s:.0f} s (blocked: a file "
                        "that never delivers its bytes, such as a FIFO): stopped and refused"
                    )
                    pool[pool.index(w)] = w = _Worker(ctx, fn)
                    _give(w, todo, limits)
    finally:
        for w in pool:
            w.stop()
    return [results[i] for i in range(len(items))]


def _give(
    worker: _Worker[Item, Value], todo: list[tuple[int, Item]], limits: Callable[[Item], Limits]
) -> None:
    if todo:
        index, item = todo.pop()
        worker.send(index, item, limits(item))


class _Worker(Generic[Item, Value]):
    def __init__(self, ctx: ForkContext, fn: Callable[[Item], Value]) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, fn), daemon=True)
        self.process.start()
        child.close()
        self.busy: tuple[int, Limits] | None = None
        self.started = 0.0
        self.cpu_seen: float | None = None
        self.wall_s = 0.0

    def send(self, index: int, item: Item, limits: Limits) -> None:
        import time

        self.busy, self.started = (index, limits), time.monotonic()
        self.cpu_seen = _cpu_s(self.process.pid)
        self.wall_s = limits.cpu_s * WALL_FACTOR + 2
        self.conn.send((index, item, limits))

    def overdue(self) -> bool:
        """Silent for wall_s with no CPU spent since the last look: blocked, not slow. A worker
        that spent CPU starts its wall clock again (its CPU cap bounds it)."""
        import time

        cpu = _cpu_s(self.process.pid)
        if cpu is not None and cpu != self.cpu_seen:
            self.cpu_seen, self.started = cpu, time.monotonic()
        return time.monotonic() - self.started > self.wall_s

    def collect(self) -> tuple[int, Outcome[Value], bool]:
        """(item index, its outcome, whether this worker may take another item); called on a busy
        worker only."""
        if self.busy is None:
            raise RuntimeError("collect() on an idle reader worker")
        index, limits = self.busy
        self.busy = None
        try:
            got_index, kind, payload = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            return index, Failed(_death(self.process.exitcode, limits)), False
        if kind == "ok":
            return got_index, Read(payload), True
        if kind == "memory":
            return got_index, Failed(_memory(limits)), False
        return got_index, Failed(payload), kind == "refused"

    def stop(self) -> None:
        try:
            if self.process.is_alive():
                self.conn.send(None)
                self.process.join(0.5)
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
        except (OSError, ValueError, BrokenPipeError):
            pass
        self.conn.close()


def _cpu_s(pid: int | None) -> float | None:
    """The process's user plus system CPU seconds (None where it cannot be read: then the wall
    clock alone decides)."""
    try:
        import psutil

        times = psutil.Process(pid).cpu_times()
    except Exception:  # noqa: BLE001 - gone, not permitted, no psutil: the wall clock decides
        return None
    return times.user + times.system


def _memory(limits: Limits) -> str:
    return (
        f"reading it needed more than {limits.memory_bytes // MIB} MiB (far more than its size "
        "explains: a pickle built to exhaust memory?): refused"
    )


def _death(code: int | None, limits: Limits) -> str:
    if code == -signal.SIGXCPU:
        return (
            f"reading it took more than {limits.cpu_s} s of CPU (far more than its size "
            "explains: a pickle built to be slow?): stopped and refused"
        )
    if code == -signal.SIGKILL:
        return "its reader was killed (out of memory?): refused"
    if code is not None and code < 0:
        return f"it crashed its reader ({signal.Signals(-code).name}): refused"
    return f"its reader exited with code {code}: refused"


def _serve(conn: Connection, fn: Callable[[object], object]) -> None:
    """A worker: caps itself per file, runs `fn`, sends back what it returned or why not."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, item, limits = message
        _cap(limits)
        try:
            reply = (index, "ok", fn(item))
        except UsageProblem as exc:
            reply = (index, "refused", str(exc))
        except MemoryError:
            reply = (index, "memory", None)
        except RecursionError:
            reply = (index, "refused", "nested too deeply to read: refused")
        except Exception as exc:  # noqa: BLE001 - named to the parent, which goes on
            reply = (index, "error", f"reading it failed: {type(exc).__name__}: {exc}"[:300])
        _uncap()
        conn.send(reply)
        if reply[1] == "memory":
            return


def _cap(limits: Limits) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = _mapped() + limits.memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (_within(want, hard), hard))
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (_within(spent + limits.cpu_s, cpu_hard), cpu_hard))


def _within(soft: int, hard: int) -> int:
    """A soft limit never above the hard one (which only root could raise)."""
    return soft if hard == resource.RLIM_INFINITY else min(soft, hard)


def _uncap() -> None:
    for which in (resource.RLIMIT_AS, resource.RLIMIT_CPU):
        _, hard = resource.getrlimit(which)
        resource.setrlimit(which, (hard, hard))


def _mapped() -> int:
    """This process's address space now (VmSize), in bytes."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
