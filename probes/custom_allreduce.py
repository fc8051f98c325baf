"""The custom all-reduce probe, worker side: correctness and timing of each all-reduce path.

Run by `ncclprobe.launch.run_pool` (entry `ncclprobe.probes.custom_allreduce:run`, backend nccl,
one GPU per rank or every rank on GPU 0 under --share-gpu). The payload's `steps` (the plan,
`custom_allreduce_plan.steps`) say what to measure, in order; every rank walks the same steps,
which is what keeps the custom kernels' barriers in step across processes.

Per step (method, dtype, size, mode) a rank emits one `result`:
  - `wrong`: elements that differ from the exact sum over `checks` calls, each on fresh inputs
    (so a stale buffer shows) that are small integers, exact in every dtype;
  - `trial_us`: per-call times of each trial (CUDA events; eager: `iters` back-to-back calls;
    graph: one replay of `graph_ops` captured calls, `replays` times, per call);
  - `host_us`: eager only, the host's enqueue time per call (when it is near `trial_us`, the
    eager figure is the launch path, not the collective).
After every stage that can fail (a method's setup, a step's binding, its measurement) the ranks
agree over the control group, so one rank's failure never leaves another waiting in a collective:
a method that cannot be set up on some rank is `unavailable` on all, one that fails a step is
`dropped` on all (with each rank's reason), and the rest carries on.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ncclprobe.cudagraph import capture_graph
from ncclprobe.probes.collectives.base import crafted_input, torch_dtype
from ncclprobe.probes.custom_allreduce_methods import Unavailable, build


def run(ctx) -> None:
    p = ctx.payload
    torch.cuda.set_device(ctx.device)
    torch.zeros(1, device=ctx.device)  # the CUDA context exists before any driver call
    ctx.emit("device", **_device_facts(ctx))
    methods, shared = build(ctx, [m for m in p["methods"] if m not in p["skip"]], p["max_bytes"], p)
    try:
        active = {m.name: m for m in methods if _set_up(ctx, m)}
        for step in p["steps"]:
            method = active.get(step["method"])
            if method is not None and not _run_step(ctx, method, step, p):
                del active[method.name]
                for other in [m for m in active.values() if m.group and m.group == method.group]:
                    del active[other.name]
                    ctx.emit(
                        "dropped",
                        **{**step, "method": other.name},
                        reasons={
                            "all ranks": f"shares its workspace with {method.name}, which failed"
                        },
                    )
    finally:
        for method in methods:
            method.close()
        shared.close()


def _set_up(ctx, method) -> bool:
    """prepare (local), then connect (collective), the ranks agreeing after each."""
    for stage in (method.prepare, method.connect):
        reasons = _agree(ctx, _attempt(stage))
        if reasons:
            ctx.emit("unavailable", method=method.name, reasons=reasons)
            return False
    ctx.emit("method", method=method.name, description=_description(method))
    return True


def _description(method) -> str:
    try:
        return method.describe()
    except Exception as exc:  # noqa: BLE001  (a description is never worth a failed run)
        return f"(not described: {type(exc).__name__}: {exc})"


def _run_step(ctx, method, step: dict, p: dict) -> bool:
    """Measure one step; False when the method failed on some rank (then every rank drops it)."""
    dtype = torch_dtype(step["dtype"])
    n = step["size_bytes"] // torch.empty(0, dtype=dtype).element_size()
    result = {}

    def measure():
        _line_up(ctx)
        timed = _graph_step if step["mode"] == "graph" else _eager_step
        result.update(timed(ctx, method, n, dtype, p))
        torch.cuda.synchronize()
        return method.failure()

    for stage in (lambda: method.bind(n, dtype), measure):
        reasons = _agree(ctx, _attempt(stage))
        if reasons:
            ctx.emit("dropped", **step, reasons=reasons)
            return False
    ctx.emit("result", **step, elements=n, **result)
    return True


def _attempt(stage) -> str | None:
    """Run a stage; its failure as text (returned or raised), None when it went fine."""
    try:
        return stage() or None
    except Unavailable as exc:
        return str(exc)[:500]
    except Exception as exc:  # noqa: BLE001  (reported, and agreed on by every rank; a CUDA fault ends the worker)
        return f"{type(exc).__name__}: {exc}"[:500]


def _agree(ctx, reason: str | None) -> dict[str, str]:
    """Every rank's failure of the stage just run: {rank: reason}, or {"all ranks": reason} when
    every rank failed alike; empty when all went fine."""
    reasons: list[str | None] = [None] * ctx.world_size
    dist.all_gather_object(reasons, reason, group=ctx.control_group())
    if reasons[0] and len(set(reasons)) == 1:
        return {"all ranks": reasons[0]}
    return {str(rank): text for rank, text in enumerate(reasons) if text}


def _eager_step(ctx, method, n, dtype, p) -> dict:
    wrong = 0
    for k in range(p["checks"]):
        method.inp.copy_(_pattern(ctx, n, dtype, k))
        wrong += _mismatches(method.call(), ctx, n, dtype, k)
    for _ in range(p["warmup"]):
        method.call()

    def calls():
        for _ in range(p["iters"]):
            method.call()

    trials, host = _trials(ctx, p["trials"], calls, p["iters"])
    return {"wrong": wrong, "checked": p["checks"] * n, "trial_us": trials, "host_us": host}


def _graph_step(ctx, method, n, dtype, p) -> dict:
    one, result = _capture(method, 1)
    wrong = 0
    for k in range(p["checks"]):  # the replayed graph reads the input buffer as it is now
        method.inp.copy_(_pattern(ctx, n, dtype, k))
        one.replay()
        wrong += _mismatches(result, ctx, n, dtype, k)
    del one
    many, _ = _capture(method, p["graph_ops"])
    for _ in range(max(1, p["warmup"] // p["graph_ops"])):
        many.replay()

    def replays():
        for _ in range(p["replays"]):
            many.replay()

    trials, _ = _trials(ctx, p["trials"], replays, p["replays"] * p["graph_ops"])
    return {"wrong": wrong, "checked": p["checks"] * n, "trial_us": trials}


def _trials(ctx, trials: int, body, calls: int) -> tuple[list[float], list[float]]:
    """Per-call device time (CUDA events) and host enqueue time of `body`, which makes `calls`
    all-reduces, once per trial, every rank lined up before each."""
    device, host = [], []
    for _ in range(trials):
        _line_up(ctx)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        body()
        end.record()
        host.append((time.perf_counter() - began) * 1e6 / calls)
        end.synchronize()
        device.append(start.elapsed_time(end) * 1e3 / calls)
    return device, host


def _capture(method, calls: int):
    """A graph of `calls` all-reduces and the output of the last; the warm-up call runs for real,
    on every rank alike (`ncclprobe.cudagraph`)."""

    def calls_in_a_row():
        for _ in range(calls):
            result = method.call()
        return result

    return capture_graph(calls_in_a_row, warmup=method.call)


def _pattern(ctx, n, dtype, call: int):
    """Rank r's input of check `call`: crafted_input shifted by the call, new values every call."""
    return crafted_input(n, ctx.rank + call, dtype, ctx.device)


def _mismatches(got, ctx, n, dtype, call: int) -> int:
    torch.cuda.synchronize()
    want = sum(
        crafted_input(n, r + call, torch.float32, ctx.device) for r in range(ctx.world_size)
    ).to(dtype)
    return int((got.view(-1) != want).sum().item())


def _line_up(ctx) -> None:
    """Every rank idle and at the same point before the next timed (or first) kernel."""
    torch.cuda.synchronize()
    dist.barrier(group=ctx.control_group())


def _device_facts(ctx) -> dict:
    props = torch.cuda.get_device_properties(ctx.device)
    facts = {
        "gpu": ctx.gpu,
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    return facts
