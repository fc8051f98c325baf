"""Ranks for the custom all-reduce kernels under Triton's CPU interpreter: one forked process per
rank, each workspace a POSIX shared-memory segment that every rank maps at its own address (as
CUDA IPC maps a peer's allocation), the kernels' barriers running for real across processes.

`run_ranks(world, cases)` returns each rank's report. A case is a dict: algorithm, dtype, n, and
optionally calls (1), block (64), max_blocks (2), max_spins (65536), only (the ranks that launch;
default all). Each call gets fresh inputs (crafted_input shifted by the call), and rank r starts
each call 30 ms * r late, so a barrier that does not wait lets a rank read a peer's data before the
peer wrote it. The workspace status word is read after every case.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import time
from multiprocessing import shared_memory

import torch

KERNEL = "ncclprobe.probes.custom_allreduce_kernel"
STAGGER_S = 0.03


def _interpreted_kernels():
    """The kernel module imported afresh with the interpreter on (this process only: a fork).
    Triton itself is imported again too: its own library functions (tl.zeros) are jit functions
    that only the interpreter's import of Triton makes callable there."""
    os.environ["TRITON_INTERPRET"] = "1"
    for name in list(sys.modules):
        if name == KERNEL or (name.split(".")[0] == "triton" and not name.startswith("triton._C")):
            del sys.modules[name]
    module = importlib.import_module(KERNEL)
    assert module.interpreted()
    return module


def _rank(rank, world, names, max_bytes, cases, queue):
    try:
        queue.put((rank, _rank_report(rank, world, names, max_bytes, cases)))
    except Exception as exc:  # noqa: BLE001  (the parent asserts on it)
        queue.put((rank, {"error": f"{type(exc).__name__}: {exc}"}))


def _rank_report(rank, world, names, max_bytes, cases):
    from ncclprobe.probes.collectives.base import crafted_input

    kernels = _interpreted_kernels()
    layout = kernels.Layout(max_bytes=max_bytes)
    order = [
        (rank + k) % world for k in range(world)
    ]  # forked ranks would otherwise map them alike
    attached = {peer: shared_memory.SharedMemory(name=names[peer]) for peer in order}
    segments = [attached[peer] for peer in range(world)]
    bases = torch.tensor(
        [torch.frombuffer(s.buf, dtype=torch.uint8).data_ptr() for s in segments], dtype=torch.int64
    )
    report = {"cases": [], "addresses": bases.tolist()}
    for case in cases:
        dtype, n, wrong = getattr(torch, case["dtype"]), case["n"], []
        for call in range(case.get("calls", 1) if rank in case.get("only", range(world)) else 0):
            inp = crafted_input(n, rank + call, dtype, "cpu")
            out = torch.full_like(inp, -1)
            time.sleep(STAGGER_S * rank)
            kernels.launch(
                case["algorithm"],
                inp,
                out,
                bases,
                rank,
                world,
                layout,
                case.get("max_spins", 1 << 16),
                block=case.get("block", 64),
                max_blocks=case.get("max_blocks", 2),
            )
            want = sum(crafted_input(n, r + call, torch.float32, "cpu") for r in range(world)).to(
                dtype
            )
            wrong.append(int((out != want).sum()))
        status = torch.frombuffer(segments[rank].buf, dtype=torch.int32)[layout.status // 4].item()
        report["cases"].append(
            {
                **case,
                "wrong": wrong,
                "status": status,
                "status_text": kernels.describe_status(status),
            }
        )
    del bases
    for s in segments:
        s.close()
    return report


def run_ranks(
    world: int, cases: list[dict], *, max_bytes: int = 1 << 12, timeout_s: float = 60.0
) -> dict[int, dict]:
    from ncclprobe.probes.custom_allreduce_kernel import Layout

    size = Layout(max_bytes=max_bytes).total
    segments = [shared_memory.SharedMemory(create=True, size=size) for _ in range(world)]
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(
            target=_rank, args=(r, world, [s.name for s in segments], max_bytes, cases, queue)
        )
        for r in range(world)
    ]
    try:
        for s in segments:
            s.buf[:] = bytes(size)
        for p in procs:
            p.start()
        reports = dict(queue.get(timeout=timeout_s) for _ in procs)
        for p in procs:
            p.join(timeout_s)
        return reports
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        for s in segments:
            s.close()
            s.unlink()
