"""The worker side of the launcher: join the rendezvous, run the entry, report through messages.

Started by `ncclprobe.launch.run_pool` as `python -m ncclprobe.worker`, or under torchrun (then
RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT come from torchrun and env:// is used).

An entry is a function `entry(ctx: WorkerContext) -> None`. It reports with `ctx.emit(kind, **data)`;
every message is one flushed JSON line in the rank's own file, so nothing a rank reported is lost
if it is killed a moment later.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ncclprobe import envvars


@dataclass
class WorkerContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    payload: dict
    run_dir: Path | None
    gpu: int = 0  # the CUDA device this rank uses (NCCL backend)
    started_at: float = field(default_factory=time.time)
    _sink: TextIO | None = None  # the rank's message file (None: no launcher listens)
    _control: object = None  # the gloo group for control messages, made on first use

    @property
    def device(self):
        import torch

        return torch.device("cuda", self.gpu) if self.backend == "nccl" else torch.device("cpu")

    def emit(self, kind: str, **data) -> None:
        """Report a message to the launcher (one JSON line, flushed)."""
        if self._sink is None:
            return
        self._sink.write(json.dumps({"kind": kind, "t": time.time(), **data}, default=str) + "\n")
        self._sink.flush()

    def control_group(self):
        """A gloo group over all ranks for CPU-side coordination that never touches NCCL."""
        import torch.distributed as dist

        if self._control is None:
            self._control = (
                dist.new_group(backend="gloo") if self.backend != "gloo" else dist.group.WORLD
            )
        return self._control


def init_distributed(backend: str, rank: int, world_size: int) -> None:
    """Join the rendezvous. No device_id is bound: NCCL communicators are created lazily, per
    group, so a sweep's fresh group reads the environment again (and several ranks may share a
    GPU, where torch would otherwise guess the device from the rank)."""
    import torch.distributed as dist

    port = envvars.get(envvars.STORE_PORT)
    if port:  # the launcher hosts the store; every rank is a client
        store = dist.TCPStore(
            os.environ.get("MASTER_ADDR", "127.0.0.1"),
            int(port),
            world_size,
            is_master=False,
            timeout=_timedelta(300),
        )
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    else:  # torchrun
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size)


def _timedelta(seconds: float):
    from datetime import timedelta

    return timedelta(seconds=seconds)


def context_from_env(payload: dict | None = None) -> WorkerContext:
    run_dir = envvars.get(envvars.RUN_DIR)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    ctx = WorkerContext(
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
        local_rank=local_rank,
        gpu=int(envvars.get(envvars.GPU, default=local_rank)),
        backend=envvars.get(envvars.BACKEND) or _default_backend(),
        payload=payload if payload is not None else _read_payload(run_dir),
        run_dir=Path(run_dir) if run_dir else None,
    )
    if run_dir:
        ctx._sink = open(Path(run_dir) / f"rank{rank}.jsonl", "a", encoding="utf-8")
    return ctx


def _default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def _read_payload(run_dir: str | None) -> dict:
    if not run_dir:
        return {}
    return json.loads((Path(run_dir) / "payload.json").read_text())


def resolve(entry: str):
    module_name, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def die_with_launcher() -> None:
    """Linux: ask the kernel to SIGKILL this worker when the launcher dies (kill -9 of a sweep),
    so no orphaned rank keeps a GPU busy. Workers lead their own process group, so nothing else
    would stop them."""
    parent = envvars.get(envvars.PARENT_PID)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # the launcher died before prctl took hold
        os._exit(1)


THREADS_ENV = envvars.WORKER_THREADS  # the override: torch threads per worker rank


def worker_threads(local_ranks: int, environ=os.environ) -> int:
    """Torch threads for one rank: the cores this process may run on shared among the host's ranks,
    at least 1, unless NCCLPROBE_WORKER_THREADS says otherwise. torch's default (a thread per core in
    every rank) oversubscribes the cores as soon as two ranks share them, and a rank whose threads
    wait for a core stalls every collective: out-of-place 256 KiB over gloo took 7458 us against
    1984 us with one thread per rank on the 2-core machine (issue 17)."""
    override = envvars.get(THREADS_ENV, environ, default="").strip()
    if override:
        from ncclprobe.numbers import parse_int

        return parse_int(override, THREADS_ENV, min=1)
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    return max(1, cores // max(1, local_ranks))


def _local_ranks(ctx: WorkerContext) -> int:
    """Ranks on this host: torchrun says so; run_pool starts every rank here."""
    return int(os.environ.get("LOCAL_WORLD_SIZE") or ctx.world_size)


def main() -> int:
    die_with_launcher()
    ctx = context_from_env()
    entry = resolve(envvars.get(envvars.ENTRY, required=True))
    import torch

    threads = worker_threads(_local_ranks(ctx))
    torch.set_num_threads(threads)
    if ctx.backend == "nccl":
        torch.cuda.set_device(ctx.gpu)  # CUDA's start: still this rank's own work
    # from here this rank waits for its peers, and its CPU time is no longer its progress (the
    # launcher's watchdog, `ncclprobe.pool_progress`)
    ctx.emit(
        "rendezvous", pid=os.getpid(), host=socket.gethostname()
    )  # whose node: the merge names it
    init_distributed(ctx.backend, ctx.rank, ctx.world_size)
    ctx.emit("ready", pid=os.getpid(), backend=ctx.backend, torch_threads=threads)
    try:
        entry(ctx)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    ctx.emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
