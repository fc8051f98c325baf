"""Read many input files in worker processes, one file at a time, each under a memory and a CPU cap.

Why workers: a job of 1,024 ranks leaves 1,024 dumps or traces; reading them in parallel, each
reduced in its worker to a compact table, keeps the wall time near (files / cores) and the parent's
memory to the tables. Why caps: some inputs cost what no byte cap bounds (a pickle's memo index, a
tuple hashed 2**30 times: `evidence.hang.safe_pickle`). The worker caps its own address space
(RLIMIT_AS, above what it already maps) and CPU time (RLIMIT_CPU, above what it already spent)
before each file, so an allocation past the budget fails with MemoryError, and a file that spins
is stopped by the kernel (SIGXCPU). The parent names each such file with why, starts a fresh
worker, and goes on with the others. No core file is written, and Ctrl-C is the parent's alone.

`map_files(fn, items, limits)` returns one `Outcome` per item, in order: the value `fn(item)`
returned, or the one-line reason it gave none. `fn` must be a module-level function; what it
returns travels back pickled, so it must be ncclprobe's own records, built from checked values.
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
from multiprocessing.connection import wait

from ncclprobe.errors import UsageProblem

MIB = 1 << 20
MAX_WORKERS = 8
WALL_FACTOR = 3  # a worker silent for this many times its CPU cap (plus 2 s) is stopped: its CPU
# cap is many times what a real file needs, and a worker blocked (a FIFO) spends no CPU at all


@dataclass(frozen=True)
class Limits:
    memory_bytes: int  # what the worker may map beyond its own size while reading the file
    cpu_s: int  # CPU seconds for the file


@dataclass(frozen=True)
class Outcome:
    value: object = None
    problem: str | None = None  # why no value: a refusal, a cap reached, a crash

    @property
    def ok(self) -> bool:
        return self.problem is None


def workers_for(count: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(count, cores, MAX_WORKERS))


def map_files(
    fn: Callable, items: Sequence, limits: Callable[[object], Limits], workers: int | None = None
) -> list[Outcome]:
    """`fn(item)` for every item in capped workers; see the module docstring."""
    if not items:
        return []
    ctx = multiprocessing.get_context("fork")
    todo = list(enumerate(items))[::-1]
    results: dict[int, Outcome] = {}
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
                if w.busy is None:
                    continue
                if w.conn in ready or w.process.sentinel in ready:
                    index, outcome, keep = w.collect()
                    results[index] = outcome
                    if not keep:
                        w.stop()
                        pool[pool.index(w)] = w = _Worker(ctx, fn)
                    _give(w, todo, limits)
                elif w.overdue():
                    index = w.busy[0]
                    w.stop()
                    results[index] = Outcome(
                        problem=f"reading it did not finish in {w.wall_s:.0f} s (far more than its "
                        "size explains: a pickle built to be slow, or a file that blocks): stopped "
                        "and refused"
                    )
                    pool[pool.index(w)] = w = _Worker(ctx, fn)
                    _give(w, todo, limits)
    finally:
        for w in pool:
            w.stop()
    return [results[i] for i in range(len(items))]


def _give(worker: _Worker, todo: list, limits: Callable) -> None:
    if todo:
        index, item = todo.pop()
        worker.send(index, item, limits(item))


class _Worker:
    def __init__(self, ctx, fn):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, fn), daemon=True)
        self.process.start()
        child.close()
        self.busy: tuple[int, Limits] | None = None
        self.started = 0.0
        self.wall_s = 0.0

    def send(self, index: int, item, limits: Limits) -> None:
        import time

        self.busy, self.started = (index, limits), time.monotonic()
        self.wall_s = limits.cpu_s * WALL_FACTOR + 2
        self.conn.send((index, item, limits))

    def overdue(self) -> bool:
        import time

        return time.monotonic() - self.started > self.wall_s

    def collect(self) -> tuple[int, Outcome, bool]:
        """(item index, its outcome, whether this worker may take another item)."""
        index, limits = self.busy
        self.busy = None
        try:
            got_index, kind, payload = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            return index, Outcome(problem=_death(self.process.exitcode, limits)), False
        if kind == "ok":
            return got_index, Outcome(value=payload), True
        if kind == "memory":
            return got_index, Outcome(problem=_memory(limits)), False
        return got_index, Outcome(problem=payload), kind == "refused"

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


def _serve(conn, fn) -> None:
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
