"""How one (collective, size, placement, mode) is timed; every time is per collective call, µs.

Each rank reports three lists, aggregated across ranks by the parent (ncclprobe.sweep.aggregate):
  - `trial_us`: per trial, the span of its `iters` iterations / (iters x agg);
  - `iter_us`: per iteration (nccl-tests `-I`): on GPU the gap between CUDA events recorded before
    and after each iteration in eager mode, one sample per replay in graph mode (a graph's inside
    cannot be timed per node); on gloo perf_counter around each blocking iteration;
  - `issue_us`: the host time to issue a trial's calls / (iters x agg) (nccl-tests `-C`): beside the
    completion time it shows when an eager loop is host-bound.

Buffers (nccl-tests' habit): `slots` holds one (send, recv) pair per position of a buffer as large
as the sweep's largest message, and iteration k uses slot k mod len(slots), so consecutive calls
touch different memory and a message that fits in the GPU's L2 cache is not measured from it
(`--buffers reuse` keeps one slot: the L2-hot case of an engine re-reducing one activation buffer).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ncclprobe.cudagraph import capture_graph


def iteration(comm, coll, slots, k: int, agg: int, in_place: bool, op: str) -> None:
    """The k-th iteration: `agg` collectives in one group, each on its own slot."""
    with comm.grouped(agg):
        for j in range(agg):
            send, recv = slots[(k * agg + j) % len(slots)]
            comm.launch(coll, send, recv, in_place, op)


def eager_trials(ctx, comm, coll, slots, p, in_place: bool, op: str) -> dict:
    agg, iters = p["agg"], p["iters"]
    for k in range(p["warmup"]):
        iteration(comm, coll, slots, k, agg, in_place, op)
    out = {"trial_us": [], "iter_us": [], "issue_us": []}
    timer = _gpu_trial if ctx.backend == "nccl" else _cpu_trial
    for _ in range(p["trials"]):
        sync(ctx)
        trial, per_iter, issued = timer(
            lambda k: iteration(comm, coll, slots, k, agg, in_place, op),
            iters,
            p.get("iter_events", True),
        )
        out["trial_us"].append(trial / agg)
        out["iter_us"] += [t / agg for t in per_iter]
        out["issue_us"].append(issued / agg)
    return out


def _gpu_trial(run, iters: int, per_iteration: bool):
    """(µs per iteration over the trial, per-iteration µs, host issue µs per iteration)."""
    events = [
        torch.cuda.Event(enable_timing=True) for _ in range(iters + 1 if per_iteration else 2)
    ]
    began = time.perf_counter()
    events[0].record()
    for k in range(iters):
        run(k)
        if per_iteration:
            events[k + 1].record()
    if not per_iteration:
        events[1].record()
    issued = (time.perf_counter() - began) * 1e6 / iters
    events[-1].synchronize()
    span = events[0].elapsed_time(events[-1]) * 1e3 / iters
    gaps = [a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])] if per_iteration else []
    return span, gaps, issued


def _cpu_trial(run, iters: int, per_iteration: bool):
    stamps = [time.perf_counter()]
    for k in range(iters):
        run(k)
        stamps.append(time.perf_counter())
    span = (stamps[-1] - stamps[0]) * 1e6 / iters
    return span, [(b - a) * 1e6 for a, b in zip(stamps, stamps[1:])], span


def graph_trials(ctx, comm, coll, slots, p, in_place: bool, op: str) -> dict:
    """The `iters` iterations captured once in a CUDA graph, replayed once per trial."""
    agg, iters = p["agg"], p["iters"]
    graph = capture(
        lambda: [iteration(comm, coll, slots, k, agg, in_place, op) for k in range(iters)]
    )
    for _ in range(max(1, p["warmup"] // max(iters, 1))):
        graph.replay()
    out = {"trial_us": [], "iter_us": [], "issue_us": []}
    calls = iters * agg
    for _ in range(p["trials"]):
        sync(ctx)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        graph.replay()
        end.record()
        issued = (time.perf_counter() - began) * 1e6 / calls
        end.synchronize()
        per_call = start.elapsed_time(end) * 1e3 / calls
        out["trial_us"].append(per_call)
        out["iter_us"].append(per_call)
        out["issue_us"].append(issued)
    return out


def capture(work):
    """`work()` captured in a CUDA graph after one warm-up run on a side stream (which also
    creates the communicator's resources outside the capture: `ncclprobe.cudagraph`)."""
    graph, _ = capture_graph(work)
    return graph


def sync(ctx) -> None:
    """Line the ranks up before a timed trial, outside the measured communicator."""
    if ctx.backend == "nccl":
        torch.cuda.synchronize()
    dist.barrier(group=ctx.control_group())
