"""The sweep's worker entry: measure one pool's configurations on a fresh communicator each.

Run by `ncclprobe.launch.run_pool` (entry `ncclprobe.probes.sweep_worker:run`). Every configuration
of a pool shares the pool's once-per-process settings (set at exec by the launcher); its
per-communicator settings are put into os.environ here, right before a fresh communicator is
created (`dist.new_group`, or a raw NCCL communicator with `--path nccl`), because NCCL reads them
again at every communicator creation.

Per configuration the worker emits `config-start` (with the NCCL log offset and the NCCL_*
variables it saw), one `result` per (case, mode, placement, size) with its per-trial, per-iteration
and host-issue times (probes/sweep_timing.py), and `config-end`. A case is one (collective, op,
dtype) the parent planned. The parent aggregates across ranks and decides what was proven.

Test hooks (honoured only when set; the tests set them, nobody else should):
  NCCLPROBE_TEST_HANG_CONFIG=<config_id>   rank 1 sleeps forever in that configuration;
  NCCLPROBE_TEST_CRASH_CONFIG=<config_id>  rank 1 exits with status 3 in that configuration;
  NCCLPROBE_TEST_WRONG_CONFIG=<config_id>  one rank perturbs its correctness input there: the root
                                           of a rooted collective (others ignore its input), else rank 1;
  NCCLPROBE_TEST_REFUSE_CASE=<collective>  rank 1 raises where that collective is measured, as torch does
                                           for a combination it does not support.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from ncclprobe import envvars
from ncclprobe.nccl.recipes import rank_log
from ncclprobe.probes import sweep_timing
from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import torch_dtype
from ncclprobe.probes.sweep_comm import open_comm
from ncclprobe.records import COST_SPLIT_VARIANTS as VARIANTS
from ncclprobe.records import cost_split_variant as variant_name

HANG_HOOK, CRASH_HOOK, WRONG_HOOK, REFUSE_HOOK = (
    envvars.TEST_HANG_CONFIG,
    envvars.TEST_CRASH_CONFIG,
    envvars.TEST_WRONG_CONFIG,
    envvars.TEST_REFUSE_CASE,
)
DIGITS = 4  # µs to 0.1 ns: messages stay small, nothing measurable is lost


def run(ctx) -> None:
    """Measure every configuration in `ctx.payload["configs"]`, in order."""
    payload = ctx.payload
    _own_debug_file(ctx)  # torch threads: pinned for every worker by ncclprobe.worker
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
    ctx.emit(
        "config-start",
        config_id=config_id,
        log_offset=_log_size(),
        seen_env={k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    )
    _test_hooks(ctx, config_id)
    comm = open_comm(ctx, payload.get("path", "torch"))
    comms = {comm.path: comm}
    try:
        if _splits(ctx, payload):  # the other path, for the eager cost split (docs/METRICS.md)
            other = "torch" if comm.path == "nccl" else "nccl"
            comms[other] = open_comm(ctx, other)
        for case in payload["cases"]:
            _run_case(ctx, payload, comms, case, config_id)
    finally:
        for each in comms.values():
            each.close()
    ctx.emit("config-end", config_id=config_id, log_offset=_log_size())


def _splits(ctx, payload) -> bool:
    """Whether eager rows are also timed through the other path and the other event setting."""
    return bool(payload.get("cost_split")) and ctx.backend == "nccl" and "eager" in payload["modes"]


def _run_case(ctx, payload, comms, case, config_id) -> None:
    coll = COLLECTIVES[case["collective"]]
    shapes = _distinct_shapes(coll, payload["sizes"], case["dtype"], ctx.world_size)
    largest = max(s.size_bytes for s in shapes)
    for mode in payload["modes"]:
        for in_place in [p for p in payload["in_place"] if p in coll.placements]:
            for shape in shapes:
                try:
                    timing = _measure(
                        ctx, payload, comms, coll, case, mode, in_place, shape, largest, config_id
                    )
                except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
                    # torch or NCCL refusing this one measurement (not a hung or broken communicator):
                    # record why and go on with the rest of the configuration
                    timing = {
                        "wrong": None,
                        "trial_us": [],
                        "iter_us": [],
                        "issue_us": [],
                        "error": f"{type(exc).__name__}: {exc}"[:300],
                    }
                ctx.emit(
                    "result",
                    config_id=config_id,
                    collective=coll.name,
                    op=case["op"],
                    dtype=case["dtype"],
                    mode=mode,
                    in_place=in_place,
                    size_bytes=shape.size_bytes,
                    count=shape.count,
                    **timing,
                )


def _distinct_shapes(coll, sizes, dtype, nranks):
    """One shape per distinct message: small sizes can round to the same buffers."""
    shapes = {}
    for size in sizes:
        shape = coll.shape(size, dtype, nranks)
        shapes.setdefault(shape.size_bytes, shape)
    return [shapes[k] for k in sorted(shapes)]


def _test_hooks(ctx, config_id: str) -> None:
    if ctx.rank != 1:
        return
    if envvars.get(HANG_HOOK) == config_id:
        time.sleep(3600)
    if envvars.get(CRASH_HOOK) == config_id:
        print(f"planted crash (test hook {CRASH_HOOK}) in {config_id}", file=sys.stderr, flush=True)
        os._exit(3)


def _log_size() -> int:
    try:
        return os.path.getsize(os.environ.get("NCCL_DEBUG_FILE", ""))
    except OSError:
        return 0


def _measure(ctx, payload, comms, coll, case, mode, in_place, shape, largest, config_id) -> dict:
    if ctx.rank == 1 and envvars.get(REFUSE_HOOK) == coll.name:
        raise RuntimeError(f"planted refusal (test hook {REFUSE_HOOK})")
    comm = comms[payload.get("path", "torch")]
    dtype, op = torch_dtype(case["dtype"]), case["op"]
    for each in comms.values():
        each.bind(shape, case["dtype"])
    wrong = None
    if payload.get("check", True):
        perturb = envvars.get(WRONG_HOOK) == config_id and ctx.rank == (
            coll.root if coll.root >= 0 else 1
        )
        wrong = _correctness(ctx, comm, coll, shape, case, dtype, in_place, mode, perturb)
    slots = _slots(ctx, coll, shape, largest, dtype, in_place, op, payload)
    timer = sweep_timing.graph_trials if mode == "graph" else sweep_timing.eager_trials
    times = timer(ctx, comm, coll, slots, payload, in_place, op)
    issued = {key: times.pop(key) for key in ("issued_by", "issued_by_why") if key in times}
    out = {"wrong": wrong, **{k: [round(t, DIGITS) for t in v] for k, v in times.items()}}
    out.update(issued)
    if mode == "eager" and len(comms) > 1:
        out.update(_cost_split(ctx, payload, comms, coll, slots, in_place, op, times))
    return out


def _cost_split(ctx, payload, comms, coll, slots, in_place, op, times) -> dict:
    """The same measurement through both paths, with and without per-iteration events, on the
    same buffers right after the row's own (which is one of the four): per-trial µs per call."""
    own = (payload.get("path", "torch"), payload.get("iter_events", True))
    split, refused = {}, {}
    for path, events in VARIANTS:
        name = variant_name(path, events)
        if (path, events) == own:
            split[name] = times["trial_us"]
            continue
        try:
            timed = sweep_timing.eager_trials(
                ctx, comms[path], coll, slots, payload, in_place, op, events=events
            )
            split[name] = timed["trial_us"]
        except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
            refused[name] = f"{type(exc).__name__}: {exc}"[:200]
    return {
        "split": {k: [round(t, DIGITS) for t in v] for k, v in split.items()},
        "split_refused": refused,
    }


def _slots(ctx, coll, shape, largest, dtype, in_place, op, payload):
    """The (send, recv) pairs the timed iterations cycle through (see sweep_timing): views into one
    allocation per buffer, slot k at k buffers from the start, as nccl-tests shifts its pointers
    inside buffers of its largest message (`startColl`); in place one allocation holds both."""
    calls = payload["iters"] * payload["agg"]
    count = (
        1 if payload.get("buffers") == "reuse" else max(1, min(calls, largest // shape.size_bytes))
    )
    send, recv = coll.buffers(shape, ctx.rank, ctx.world_size, dtype, ctx.device, in_place, op)
    return [(send, recv)] if count == 1 else rotating(send, recv, count)


def rotating(send, recv, count: int) -> list:
    """`count` copies of (send, recv), each buffer's copies back to back in one allocation."""
    if send.untyped_storage().data_ptr() != recv.untyped_storage().data_ptr():
        sends = send.repeat(count).view(count, -1)
        recvs = recv.repeat(count).view(count, -1)
        return [(sends[k], recvs[k]) for k in range(count)]
    base, view = (send, recv) if send.numel() >= recv.numel() else (recv, send)
    bases = base.repeat(count).view(count, -1)
    shift = view.storage_offset() - base.storage_offset()
    views = [
        bases[k].as_strided(view.shape, view.stride(), bases[k].storage_offset() + shift)
        for k in range(count)
    ]
    return [(b, v) if base is send else (v, b) for b, v in zip(bases, views)]


def _correctness(ctx, comm, coll, shape, case, dtype, in_place, mode, perturb) -> int:
    """One collective on crafted inputs, compared element by element with the analytic result."""
    op = case["op"]
    send, recv = coll.buffers(shape, ctx.rank, ctx.world_size, dtype, ctx.device, in_place, op)
    if mode == "graph":  # capturing runs one warm-up collective: restore the inputs after it
        graph = sweep_timing.capture(lambda: comm.launch(coll, send, recv, in_place, op))
        fresh_send, fresh_recv = coll.buffers(
            shape, ctx.rank, ctx.world_size, dtype, ctx.device, in_place, op
        )
        recv.copy_(fresh_recv)
        send.copy_(fresh_send)
    if perturb:
        send[0] += 1
    if mode == "graph":
        graph.replay()
    else:
        comm.launch(coll, send, recv, in_place, op)
    if ctx.backend == "nccl":
        torch.cuda.synchronize()
    expected = coll.expected(shape, ctx.rank, ctx.world_size, op)
    if expected is None:
        return 0
    got = recv.cpu()
    tolerance = coll.tolerance(case["dtype"], op, ctx.world_size)
    if got.dtype.is_floating_point:
        wrong = (got.double() - expected.double()).abs() > tolerance
    else:
        wrong = got.long() != expected.long()
    return int(wrong.sum().item())
