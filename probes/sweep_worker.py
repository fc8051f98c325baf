"""The sweep's worker entry: measure one pool's configurations on a fresh communicator each.

Run by `ncclprobe.launch.run_pool` (entry `ncclprobe.probes.sweep_worker:run`). Every configuration
of a pool shares the pool's once-per-process settings (set at exec by the launcher); its
per-communicator settings are put into os.environ here, right before a fresh communicator is
created with `dist.new_group`, because NCCL reads them again at every communicator creation.

Per configuration the worker emits `config-start` (with the NCCL log offset and the NCCL_*
variables it saw), one `result` per (mode, placement, size) with its per-trial times, and
`config-end`. The parent aggregates across ranks and decides what was proven.

Test hooks (honoured only when set; the tests set them, nobody else should):
  NCCLPROBE_TEST_HANG_CONFIG=<config_id>   rank 1 sleeps forever in that configuration;
  NCCLPROBE_TEST_CRASH_CONFIG=<config_id>  rank 1 exits with status 3 in that configuration;
  NCCLPROBE_TEST_WRONG_CONFIG=<config_id>  rank 1 perturbs its correctness input there.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from ncclprobe.nccl.recipes import rank_log
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import torch_dtype

HANG_HOOK, CRASH_HOOK, WRONG_HOOK = ("NCCLPROBE_TEST_HANG_CONFIG", "NCCLPROBE_TEST_CRASH_CONFIG",
                                     "NCCLPROBE_TEST_WRONG_CONFIG")


def run(ctx) -> None:
    """Measure every configuration in `ctx.payload["configs"]`, in order."""
    payload = ctx.payload
    _own_debug_file(ctx)
    switched = sorted({key for config in payload["configs"] for key in config["comm_settings"]})
    for config in payload["configs"]:
        _run_config(ctx, payload, config, switched)


def _own_debug_file(ctx) -> None:
    """Under torchrun nobody set a per-rank NCCL log: choose one before NCCL starts logging."""
    if os.environ.get("NCCL_DEBUG") and not os.environ.get("NCCL_DEBUG_FILE") and ctx.run_dir:
        os.environ["NCCL_DEBUG_FILE"] = str(rank_log(ctx.run_dir, ctx.rank))


def _run_config(ctx, payload, config, switched) -> None:
    config_id = config["config_id"]
    for key in switched:  # per-communicator settings: exactly this configuration's, others unset
        if key in config["comm_settings"]:
            os.environ[key] = config["comm_settings"][key]
        else:
            os.environ.pop(key, None)
    ctx.emit("config-start", config_id=config_id, log_offset=_log_size(),
             seen_env={k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")})
    _test_hooks(ctx, config_id)
    group = dist.new_group(list(range(ctx.world_size)), backend=ctx.backend)
    try:
        for mode in payload["modes"]:
            for in_place in payload["in_place"]:
                for size in payload["sizes"]:
                    ctx.emit("result", config_id=config_id, mode=mode, in_place=in_place, size_bytes=size,
                             **_measure(ctx, payload, group, mode, in_place, size, config_id))
    finally:
        dist.destroy_process_group(group)
    ctx.emit("config-end", config_id=config_id, log_offset=_log_size())


def _test_hooks(ctx, config_id: str) -> None:
    if ctx.rank != 1:
        return
    if os.environ.get(HANG_HOOK) == config_id:
        time.sleep(3600)
    if os.environ.get(CRASH_HOOK) == config_id:
        print(f"planted crash (test hook {CRASH_HOOK}) in {config_id}", file=sys.stderr, flush=True)
        os._exit(3)


def _log_size() -> int:
    try:
        return os.path.getsize(os.environ.get("NCCL_DEBUG_FILE", ""))
    except OSError:
        return 0


def _measure(ctx, payload, group, mode, in_place, size, config_id) -> dict:
    coll = COLLECTIVES[payload["collective"]]
    dtype = torch_dtype(payload["dtype"])
    count = coll.count(size, payload["dtype"], ctx.world_size)
    wrong = _correctness(ctx, coll, group, count, dtype, in_place, mode,
                         perturb=os.environ.get(WRONG_HOOK) == config_id and ctx.rank == 1)
    inp, out = coll.make_buffers(count, ctx.rank, ctx.world_size, dtype, ctx.device)
    timer = _graph_trials if mode == "graph" else _eager_trials
    trials = timer(ctx, coll, group, inp, out, in_place, payload)
    return {"count": count, "wrong": wrong, "trial_us": trials, "median_us": statistics.median(trials)}


def _correctness(ctx, coll, group, count, dtype, in_place, mode, perturb) -> int:
    """One collective on crafted inputs, compared element by element with the analytic result."""
    inp, out = coll.make_buffers(count, ctx.rank, ctx.world_size, dtype, ctx.device)
    if mode == "graph":  # capturing runs one warm-up collective: restore the inputs after it
        graph = _capture(coll, group, inp, out, in_place, 1)
        fresh_inp, fresh_out = coll.make_buffers(count, ctx.rank, ctx.world_size, dtype, ctx.device)
        inp.copy_(fresh_inp)
        out.copy_(fresh_out)
    if perturb:
        inp[0] += 1
    if mode == "graph":
        graph.replay()
        torch.cuda.synchronize()
    else:
        coll.launch(inp, out, group, in_place)
    got = inp if in_place else out
    expected = coll.expected(count, ctx.rank, ctx.world_size, dtype, ctx.device)
    return int((got != expected).sum().item())


def _eager_trials(ctx, coll, group, inp, out, in_place, payload) -> list[float]:
    for _ in range(payload["warmup"]):
        coll.launch(inp, out, group, in_place)
    iters, times = payload["iters"], []
    for _ in range(payload["trials"]):
        _sync(ctx)
        if ctx.backend == "nccl":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                coll.launch(inp, out, group, in_place)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / iters)
        else:
            began = time.perf_counter()
            for _ in range(iters):
                coll.launch(inp, out, group, in_place)
            times.append((time.perf_counter() - began) * 1e6 / iters)
    return times


def _graph_trials(ctx, coll, group, inp, out, in_place, payload) -> list[float]:
    """The timed iterations captured once in a CUDA graph, replayed once per trial."""
    iters = payload["iters"]
    graph = _capture(coll, group, inp, out, in_place, iters)
    for _ in range(max(1, payload["warmup"] // max(iters, 1))):
        graph.replay()
    times = []
    for _ in range(payload["trials"]):
        _sync(ctx)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / iters)
    return times


def _capture(coll, group, inp, out, in_place, calls: int):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on the capture stream, as torch's graph docs ask
        coll.launch(inp, out, group, in_place)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            coll.launch(inp, out, group, in_place)
    torch.cuda.synchronize()
    return graph


def _sync(ctx) -> None:
    """Line the ranks up before a timed trial, outside the measured communicator."""
    if ctx.backend == "nccl":
        torch.cuda.synchronize()
    dist.barrier(group=ctx.control_group())
