"""How one (collective, size, placement, mode) is timed; every time is per collective call, µs.

Each rank reports three lists, aggregated across ranks by the parent (ncclprobe.stats):
  - `trial_us`: per trial, the span of its `iters` iterations / (iters x agg): on GPU one CUDA
    event pair around a batch prepared before the clock starts (`sweep_comm.Batch`);
  - `iter_us`: per iteration (nccl-tests `-I`): on GPU the gap between CUDA events recorded before
    and after each iteration in eager mode, one sample per replay in graph mode (a graph's inside
    cannot be timed per node); on gloo perf_counter around each blocking iteration;
  - `issue_us`: the host time to issue a trial's calls / (iters x agg) (nccl-tests `-C`): beside the
    completion time it shows when an eager loop is host-bound.

Buffers (nccl-tests' habit): `slots` holds one (send, recv) pair per position of a buffer as large
as the sweep's largest message (views into one allocation per buffer, as nccl-tests shifts its
pointers), and iteration k uses slot k mod len(slots), so consecutive calls
touch different memory and a message that fits in the GPU's L2 cache is not measured from it
(`--buffers reuse` keeps one slot: the L2-hot case of an engine re-reducing one activation buffer).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ncclprobe.cudagraph import capture_graph


def eager_trials(ctx, comm, coll, slots, p, in_place: bool, op: str, events=None) -> dict:
    """`trials` timed trials of `iters` iterations, after `warmup` untimed ones. `events`: a CUDA
    event per iteration (default: the sweep's --iter-events)."""
    agg, iters = p["agg"], p["iters"]
    events = p.get("iter_events", True) if events is None else events
    if ctx.backend != "nccl":
        return _cpu_trials(ctx, comm, coll, slots, p, in_place, op)
    if p["warmup"]:
        comm.prepare(coll, slots, p["warmup"], agg, in_place, op).issue()
    batch = comm.prepare(coll, slots, iters, agg, in_place, op, events=events)
    out: dict[str, list[float]] = {"trial_us": [], "iter_us": [], "issue_us": []}
    if batch.issued_by:
        out["issued_by"] = batch.issued_by
    if batch.issued_by_why:
        out["issued_by_why"] = batch.issued_by_why
    for _ in range(p["trials"]):
        sync(ctx)
        trial, per_iter, issued = _gpu_trial(batch, iters)
        out["trial_us"].append(trial / agg)
        out["iter_us"] += [t / agg for t in per_iter]
        out["issue_us"].append(issued / agg)
    return out


def _gpu_trial(batch, iters: int):
    """(µs per iteration over the trial, per-iteration µs, host issue µs per iteration): one
    event pair around the prepared batch, as nccl-tests brackets its loop with one clock."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    began = time.perf_counter()
    start.record(batch.stream)
    batch.issue()
    end.record(batch.stream)
    issued = (time.perf_counter() - began) * 1e6 / iters
    end.synchronize()
    span = start.elapsed_time(end) * 1e3 / iters
    marks = [start, *batch.marks]
    gaps = [a.elapsed_time(b) * 1e3 for a, b in zip(marks, marks[1:])]
    return span, gaps, issued


def _cpu_trials(ctx, comm, coll, slots, p, in_place: bool, op: str) -> dict:
    """gloo: perf_counter around each blocking iteration."""
    agg, iters = p["agg"], p["iters"]
    for k in range(p["warmup"]):
        comm.iteration(coll, slots, k, agg, in_place, op)
    out: dict[str, list[float]] = {"trial_us": [], "iter_us": [], "issue_us": []}
    for _ in range(p["trials"]):
        sync(ctx)
        stamps = [time.perf_counter()]
        for k in range(iters):
            comm.iteration(coll, slots, k, agg, in_place, op)
            stamps.append(time.perf_counter())
        span = (stamps[-1] - stamps[0]) * 1e6 / iters
        out["trial_us"].append(span / agg)
        out["iter_us"] += [(b - a) * 1e6 / agg for a, b in zip(stamps, stamps[1:])]
        out["issue_us"].append(span / agg)
    return out


def graph_trials(ctx, comm, coll, slots, p, in_place: bool, op: str) -> dict:
    """The `iters` iterations captured once in a CUDA graph, replayed once per trial on a stream
    of its own (not torch's legacy default stream, which synchronises with other streams)."""
    agg, iters = p["agg"], p["iters"]
    graph = capture(lambda: _capture_work(comm, coll, slots, iters, agg, in_place, op))
    stream = torch.cuda.Stream()  # nccl-tests launches its graphs on a non-blocking stream
    out: dict[str, list[float]] = {"trial_us": [], "iter_us": [], "issue_us": []}
    calls = iters * agg
    # entered once, outside the timed window: switching streams is host work (torch's stream
    # lookups, several µs each) that the GPU would wait for between the start event and the replay
    with torch.cuda.stream(stream):
        for _ in range(max(1, p["warmup"] // max(iters, 1))):
            graph.replay()
        for _ in range(p["trials"]):
            sync(ctx)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began = time.perf_counter()
            start.record(stream)
            graph.replay()
            end.record(stream)
            issued = (time.perf_counter() - began) * 1e6 / calls
            end.synchronize()
            per_call = start.elapsed_time(end) * 1e3 / calls
            out["trial_us"].append(per_call)
            out["iter_us"].append(per_call)
            out["issue_us"].append(issued)
    return out


def _capture_work(comm, coll, slots, iters, agg, in_place, op) -> None:
    """The iterations a graph captures, issued on the capturing stream."""
    if comm.path == "nccl":
        comm.prepare(coll, slots, iters, agg, in_place, op, current=True).issue()
    else:
        for k in range(iters):
            comm.iteration(coll, slots, k, agg, in_place, op)


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
