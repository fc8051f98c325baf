"""The graph-capture probe, worker side: what CUDA graphs change for NCCL collectives.

Run by `ncclprobe.launch.run_pool` (entry `ncclprobe.probes.graph_capture:run`, backend nccl, one
GPU per rank). Three measurements, each emitted as messages:

1. `timing` per (path, size): the eager path's host cost separated from its device cost, against
   graph replay. Eager calls are timed twice: back to back (`eager_loop_us`, what a decode loop
   pays: the larger of host and device time) with the host enqueue time per call from
   perf_counter (`eager_host_us`); then queued behind a GPU sleep so the whole batch is enqueued
   before the GPU reaches it (`eager_device_us`: the device time alone; `queued_ahead` says the
   sleep outlasted the enqueue). A graph of `graph_ops` collectives plus one 1-element marker op
   (so a one-rank graph is never empty) is replayed `replays` times (`graph_us_per_op`).
2. `capture`: a communicator created under VAR=first gets a captured graph; then VAR=second is
   set and a new communicator built (dist.new_group); the old graph is replayed again. NCCL's own
   log, read back between the steps, shows which value each communicator read (`set by
   environment` lines) and which algorithm/protocol each collective was planned with (TUNING
   lines, rank 0, printed when a plan is built: at capture, not at replay). With one rank NCCL runs
   no tuning model (no `set by environment` line, no TUNING line), so this part needs two or more
   ranks: two GPUs, or `--share-gpu N` (N ranks on GPU 0, kept apart by a distinct NCCL_HOSTID
   each, talking over NET/Socket); `graph_capture_verdict` reads the result.
3. `timing` for path `cupy.nccl`: the same all-reduce through a raw NCCL communicator from cupy's
   bindings (the optional extra), eager and captured, when cupy imports.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from ncclprobe.cudagraph import capture_graph
from ncclprobe.nccl.recipes import own_log
from ncclprobe.probes.graph_capture_verdict import log_segment

CLOCK_HZ = 2.0e9  # GPU clock used to size the sleep kernel; a long sleep only costs idle time


def run(ctx) -> None:
    p = ctx.payload
    torch.cuda.set_device(ctx.device)  # GPU 0 for every rank under --share-gpu
    for size in p["sizes"]:
        x = torch.ones(max(1, size // 4), dtype=torch.float32, device=ctx.device)
        call = lambda x=x: dist.all_reduce(x)
        ctx.emit("timing", path="torch.distributed", size_bytes=size, **measure(call, x, p))
    capture_settings(ctx, p)
    _raw_nccl_timings(ctx, p)  # last: a second libnccl (cupy's own) could reopen the debug file


def measure(call, buf, p) -> dict:
    """Eager (loop, host enqueue, queued device) and graph-replay times of `call`, in us."""
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    eager = eager_times(call, p["iters"])
    graph = capture(call, buf, p["graph_ops"])
    return {**eager, **replay_times(graph, p["replays"], p["graph_ops"])}


def eager_times(call, iters: int) -> dict:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    for _ in range(iters):
        call()
    end.record()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    loop_us = start.elapsed_time(end) * 1e3 / iters
    # the same calls queued behind a sleep: the GPU reaches them only after all are enqueued
    torch.cuda._sleep(int(max(host_s * 3, 1e-3) * CLOCK_HZ))
    start.record()
    for _ in range(iters):
        call()
    end.record()
    queued_ahead = not start.query()
    torch.cuda.synchronize()
    return {
        "eager_loop_us": loop_us,
        "eager_host_us": host_s * 1e6 / iters,
        "eager_device_us": start.elapsed_time(end) * 1e3 / iters,
        "queued_ahead": queued_ahead,
    }


def capture(call, buf, ops: int) -> torch.cuda.CUDAGraph:
    """A graph of `ops` calls plus a 1-element marker op (a one-rank all-reduce adds no node),
    after 3 warm-up calls on a side stream (`ncclprobe.cudagraph`)."""

    def ops_and_marker():
        for _ in range(ops):
            call()
        buf[:1].add_(0.0)

    graph, _ = capture_graph(ops_and_marker, warmup=call, warmups=3)
    return graph


def replay_times(graph, replays: int, ops: int) -> dict:
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    return {
        "graph_us_per_op": start.elapsed_time(end) * 1e3 / (replays * ops),
        "graph_launch_host_us": host_s * 1e6 / replays,
    }


def _raw_nccl_timings(ctx, p) -> None:
    if not p.get("raw_nccl", True):
        return
    try:
        comm, nccl = raw_communicator(ctx)
    except Exception as exc:  # cupy missing or unusable: say so, the rest still runs
        ctx.emit("raw-nccl-unavailable", reason=f"{type(exc).__name__}: {exc}"[:300])
        return
    for size in p["sizes"]:
        x = torch.ones(max(1, size // 4), dtype=torch.float32, device=ctx.device)
        call = lambda x=x: comm.allReduce(
            x.data_ptr(),
            x.data_ptr(),
            x.numel(),
            nccl.NCCL_FLOAT32,
            nccl.NCCL_SUM,
            torch.cuda.current_stream().cuda_stream,
        )
        ctx.emit("timing", path="cupy.nccl", size_bytes=size, **measure(call, x, p))


def raw_communicator(ctx):
    """A raw NCCL communicator over the same ranks, its unique id shared over the gloo control group."""
    import cupy
    from cupy.cuda import nccl

    cupy.cuda.Device(ctx.device.index).use()
    holder = [nccl.get_unique_id() if ctx.rank == 0 else None]
    if ctx.world_size > 1:
        dist.broadcast_object_list(holder, src=0, group=ctx.control_group())
    return nccl.NcclCommunicator(ctx.world_size, holder[0], ctx.rank), nccl


def capture_settings(ctx, p) -> None:
    """Capture under VAR=first, switch to VAR=second with a new communicator, replay the old graph."""
    var, first, second = p["variable"], p["first"], p["second"]
    size, ops, replays = p["capture_size"], p["graph_ops"], p["replays"]
    log = _DebugLog(own_log(ctx.rank))
    ranks = list(range(ctx.world_size))
    steps = {}

    os.environ[var] = first
    g1 = dist.new_group(ranks, backend="nccl")
    x1 = torch.ones(max(1, size // 4), device=ctx.device)
    call1 = lambda: dist.all_reduce(x1, group=g1)
    graph1 = _captured(call1, x1, ops)
    steps["first_comm_capture"] = {
        "value_in_env": first,
        **replay_times(graph1, replays, ops),
        "log": log.since(),
    }

    os.environ[var] = second
    g2 = dist.new_group(ranks, backend="nccl")
    x2 = torch.ones(max(1, size // 4), device=ctx.device)
    graph2 = _captured(lambda: dist.all_reduce(x2, group=g2), x2, ops)
    steps["second_comm_capture"] = {
        "value_in_env": second,
        **replay_times(graph2, replays, ops),
        "log": log.since(),
    }

    steps["first_graph_replayed_after_switch"] = {
        "value_in_env": second,
        **replay_times(graph1, replays, ops),
        "log": log.since(),
    }
    call1()
    torch.cuda.synchronize()
    steps["first_comm_eager_after_switch"] = {"value_in_env": second, "log": log.since()}
    os.environ.pop(var, None)
    ctx.emit(
        "capture",
        variable=var,
        first=first,
        second=second,
        size_bytes=size,
        log_file=log.path,
        steps=steps,
    )


def _captured(call, buf, ops):
    call()  # creates the communicator (torch creates NCCL communicators lazily)
    torch.cuda.synchronize()
    return capture(call, buf, ops)


class _DebugLog:
    """This rank's NCCL debug file, read in segments: what NCCL logged since the last call."""

    def __init__(self, path):
        self.path = str(path) if path is not None and os.path.exists(path) else None
        self.offset = os.path.getsize(self.path) if self.path else 0  # only what comes next

    def since(self) -> dict | None:
        if self.path is None:
            return None
        if os.path.getsize(self.path) < self.offset:  # truncated by another opener: start over
            self.offset = 0
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        self.offset += len(data)
        return log_segment(data.decode("utf-8", "replace"))
