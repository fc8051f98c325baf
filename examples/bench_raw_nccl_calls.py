"""What one eager NCCL call costs the host through each candidate issue path, and what a graph of
100 calls costs per call through the raw and the torch paths (issue 32; figures in docs/LOG.md).

    python3 examples/bench_raw_nccl_calls.py OUT.json [--graph-layouts | --issue-loops]

One rank, one GPU, NCCL through ctypes (`ncclprobe.probes.nccl_ctypes`) and through torch.distributed.
Every variant issues 100 calls per trial (5 trials after 20 warm-up calls) out of place over 100
rotating buffer pairs, as the sweep does, and reports per call: the host's issue time
(perf_counter over the loop), the GPU span (CUDA events around the batch) and the wall time to
completion (perf_counter until the stream is idle: nccl-tests' clock). Eager variants add one
per-call cost at a time to the bare precomputed ctypes loop, so each cost is the difference of
two rows measured side by side:

  bare             calls built once (pointers, counts, comm and stream as ctypes objects)
  pydll            the same through ctypes.PyDLL (the GIL held across the call)
  default-stream   the same on torch's default (legacy) stream instead of a non-blocking one
  typed            argtypes set, Python ints converted by ctypes at every call
  data-ptr         + tensor.data_ptr() per call (pointers computed per call)
  stream-lookup    + torch.cuda.current_stream().cuda_stream per call
  old-loop         the loop shape of the cupy path: iteration(), a group context manager,
                   per-call type lookups, data_ptr and the stream lookup (cupy's own call aside)
  ev-cudart        bare + a cudaEventRecord per call through ctypes (libcudart torch loaded)
  ev-torch         bare + torch Event.record(stream) per call
  ev-torch-current bare + torch Event.record() per call (the old path: a stream lookup inside)
  torch-in         dist.all_reduce in place; torch-out: a copy plus dist.all_reduce (torch's
                   out of place); torch-out-ev: the same with Event.record() per call

Graph variants (sizes 8 B-1 MiB, 100 calls captured, timed with events around one replay and,
as nccl-tests -G does, by the wall clock over G replays then a stream sync). `--graph-layouts`
measures only what a graph's figure depends on: the rotating buffers' layout (separate
allocations, one allocation per buffer as nccl-tests, one L2-hot slot) and the replay stream.

`--issue-loops` (issue 38) measures only the issue loops of the raw path on the same prepared
all-reduces (8 B and 256 KiB, out of place and in place), alternated over ROUNDS: the C loop
(`c-loop`), the ctypes loop (`ctypes`) and, where cupy imports, cupy's compiled binding
(`cupy`: `NcclCommunicator.allReduce` per call from a Python loop over prepared arguments, on a
communicator of cupy's own, as it cannot take ours; `libnccl_mapped` says which libnccl files
the process holds then).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ncclprobe.probes import nccl_ctypes as nc

CALLS, TRIALS, WARMUP = 100, 5, 20
EAGER_SIZES = (8, 256 << 10, 32 << 20)
GRAPH_SIZES = (8, 32 << 10, 256 << 10, 1 << 20)


def cudart():
    for line in open("/proc/self/maps"):
        path = line.rsplit(None, 1)[-1]
        if "/libcudart.so" in path:
            lib = ctypes.CDLL(path)
            fn = lib.cudaEventRecord
            fn.restype = ctypes.c_int
            return fn, path
    return None, None


def timed(issue, stream, trials=TRIALS):
    """Median over trials of (host issue, GPU span, wall to completion), µs per call."""
    rows = []
    for _ in range(trials):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record(stream)
        issue()
        b.record(stream)
        t1 = time.perf_counter()
        while not b.query():
            pass
        t2 = time.perf_counter()
        rows.append(
            ((t1 - t0) * 1e6 / CALLS, a.elapsed_time(b) * 1e3 / CALLS, (t2 - t0) * 1e6 / CALLS)
        )
    cols = list(zip(*rows))
    return {
        "issue_us": round(statistics.median(cols[0]), 3),
        "gpu_us": round(statistics.median(cols[1]), 3),
        "wall_us": round(statistics.median(cols[2]), 3),
        "gpu_us_min": round(min(cols[1]), 3),
        "gpu_us_max": round(max(cols[1]), 3),
    }


def main() -> int:
    out_path = Path(sys.argv[1])
    torch.cuda.set_device(0)
    store = dist.FileStore(str(out_path.with_suffix(".store")), 1)
    dist.init_process_group(
        "nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0)
    )
    lib = nc.Library()
    comm = nc.Communicator(lib, 1, lib.unique_id(), 0)
    side = torch.cuda.Stream()
    record_fn, cudart_path = cudart()
    doc = {
        "nccl": nc.version_text(lib.version),
        "libnccl": lib.path,
        "libcudart": cudart_path,
        "torch": torch.__version__,
        "eager": [],
        "graph": [],
        "collectives": [],
    }
    FLOAT = nc.DATA_TYPES["float32"]
    events = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS)]
    for ev in events:
        ev.record(side)
    torch.cuda.synchronize()

    doc["layouts"] = []
    if "--graph-layouts" in sys.argv:  # the second device call: what the graph figure depends on
        graph_layouts(doc, comm, out_path)
        comm.destroy()
        dist.destroy_process_group()
        return 0
    if "--issue-loops" in sys.argv:
        issue_loops(doc, comm, side, out_path)
        comm.destroy()
        dist.destroy_process_group()
        return 0
    for size in EAGER_SIZES:
        n = max(1, size // 4)
        slots = min(CALLS, (128 << 20) // (n * 4))
        pairs = [
            (torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")) for _ in range(slots)
        ]
        ptrs = [(s.data_ptr(), r.data_ptr()) for s, r in pairs]
        sh = side.cuda_stream

        def batch(stream):
            return [
                comm.call("ncclAllReduce", *ptrs[k % slots], n, FLOAT, 0, stream=stream)
                for k in range(CALLS)
            ]

        bare = batch(sh)
        variants = {}
        variants["bare"] = (lambda: comm.issue(bare), side)
        held = ctypes.PyDLL(lib.path)["ncclAllReduce"]  # the GIL kept across the call
        held.restype = ctypes.c_int
        holding = [nc.Call(c.name, held, c.args) for c in bare]
        variants["pydll"] = (lambda: comm.issue(holding), side)
        default = batch(torch.cuda.current_stream().cuda_stream)
        variants["default-stream"] = (
            lambda: comm.issue(default),
            torch.cuda.current_stream(),
        )
        typed = lib.typed("ncclAllReduce")
        handle = comm.handle.value

        def typed_loop():
            for k in range(CALLS):
                s, r = ptrs[k % slots]
                if typed(s, r, n, FLOAT, 0, handle, sh):
                    raise RuntimeError("nccl")

        variants["typed"] = (typed_loop, side)

        def data_ptr_loop():
            for k in range(CALLS):
                s, r = pairs[k % slots]
                if typed(s.data_ptr(), r.data_ptr(), n, FLOAT, 0, handle, sh):
                    raise RuntimeError("nccl")

        variants["data-ptr"] = (data_ptr_loop, side)

        def stream_lookup_loop():
            with torch.cuda.stream(side):
                for k in range(CALLS):
                    s, r = pairs[k % slots]
                    st = torch.cuda.current_stream().cuda_stream
                    if typed(s.data_ptr(), r.data_ptr(), n, FLOAT, 0, handle, st):
                        raise RuntimeError("nccl")

        variants["stream-lookup"] = (stream_lookup_loop, side)

        @contextlib.contextmanager
        def grouped(m):
            if m <= 1:
                yield
                return
            yield

        types = {"float32": FLOAT}
        opsd = {"sum": 0}

        def launch_old(send, recv):
            kind, red = types["float32"], opsd.get("sum")
            st = torch.cuda.current_stream().cuda_stream
            if typed(send.data_ptr(), recv.data_ptr(), n, kind, red, handle, st):
                raise RuntimeError("nccl")

        def iteration(k):
            with grouped(1):
                for j in range(1):
                    send, recv = pairs[(k + j) % slots]
                    launch_old(send, recv)

        def old_loop():
            with torch.cuda.stream(side):
                run = lambda k: iteration(k)  # noqa: E731 (the old loop's shape)
                for k in range(CALLS):
                    run(k)

        variants["old-loop"] = (old_loop, side)

        def old_loop_events():
            with torch.cuda.stream(side):
                for k in range(CALLS):
                    iteration(k)
                    events[k].record()

        variants["old-loop-ev-torch-current"] = (old_loop_events, side)
        if record_fn is not None:
            with_events = []
            for k, call in enumerate(bare):
                with_events += [
                    call,
                    nc.Call(
                        "cudaEventRecord",
                        record_fn,
                        (ctypes.c_void_p(events[k].cuda_event), ctypes.c_void_p(sh)),
                    ),
                ]
            variants["ev-cudart"] = (lambda: comm.issue(with_events), side)

        def ev_torch():
            for k, (_name, fn, args) in enumerate(bare):
                if fn(*args):
                    raise RuntimeError("nccl")
                events[k].record(side)

        variants["ev-torch"] = (ev_torch, side)

        def ev_torch_current():
            with torch.cuda.stream(side):
                for k, (_name, fn, args) in enumerate(bare):
                    if fn(*args):
                        raise RuntimeError("nccl")
                    events[k].record()

        variants["ev-torch-current"] = (ev_torch_current, side)
        group = dist.group.WORLD
        SUM = dist.ReduceOp.SUM

        def torch_in():
            for k in range(CALLS):
                dist.all_reduce(pairs[k % slots][1], op=SUM, group=group)

        def torch_out():
            for k in range(CALLS):
                s, r = pairs[k % slots]
                r.copy_(s)
                dist.all_reduce(r, op=SUM, group=group)

        def torch_out_ev():
            for k in range(CALLS):
                s, r = pairs[k % slots]
                r.copy_(s)
                dist.all_reduce(r, op=SUM, group=group)
                events[k].record()

        cur = torch.cuda.current_stream()
        variants["torch-in"] = (torch_in, cur)
        variants["torch-out"] = (torch_out, cur)
        variants["torch-out-ev"] = (torch_out_ev, cur)
        for name, (issue, stream) in variants.items():
            try:
                for _ in range(WARMUP // CALLS + 1):
                    issue()
                row = {"variant": name, "size_bytes": n * 4, **timed(issue, stream)}
            except Exception as exc:  # one variant failing must not lose the others
                row = {"variant": name, "size_bytes": n * 4, "error": repr(exc)[:300]}
            keep(doc, "eager", row, out_path)

    # every collective, bare precomputed calls, one rank
    for size in (8, 256 << 10):
        n = max(1, size // 4)
        s, r = torch.ones(n * 1, device="cuda"), torch.zeros(n, device="cuda")
        sp, rp, sh = s.data_ptr(), r.data_ptr(), side.cuda_stream
        plans = {
            "all_reduce": [("ncclAllReduce", (sp, rp, n, FLOAT, 0))],
            "all_gather": [("ncclAllGather", (sp, rp, n, FLOAT))],
            "reduce_scatter": [("ncclReduceScatter", (sp, rp, n, FLOAT, 0))],
            "broadcast": [("ncclBroadcast", (sp, rp, n, FLOAT, 0))],
            "reduce": [("ncclReduce", (sp, rp, n, FLOAT, 0, 0))],
            "alltoall": [("ncclAlltoAll", (sp, rp, n, FLOAT))],
            "sendrecv": [
                ("ncclGroupStart", ()),
                ("ncclSend", (sp, n, FLOAT, 0)),
                ("ncclRecv", (rp, n, FLOAT, 0)),
                ("ncclGroupEnd", ()),
            ],
        }
        for name, plan in plans.items():
            if not lib.has(plan[0][0]):
                continue
            try:
                calls = [comm.call(f, *v, stream=sh) for _ in range(CALLS) for f, v in plan]
                comm.issue(calls)
                row = {
                    "collective": name,
                    "size_bytes": n * 4,
                    **timed(lambda: comm.issue(calls), side),
                }
            except Exception as exc:
                row = {"collective": name, "size_bytes": n * 4, "error": repr(exc)[:300]}
            keep(doc, "collectives", row, out_path)

    # graphs: 100 calls captured, per call
    for size in GRAPH_SIZES:
        n = max(1, size // 4)
        slots = min(CALLS, (128 << 20) // (n * 4))
        pairs = [
            (torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")) for _ in range(slots)
        ]
        ptrs = [(s.data_ptr(), r.data_ptr()) for s, r in pairs]
        group, SUM = dist.group.WORLD, dist.ReduceOp.SUM

        def raw(in_place, count=CALLS):
            def work():
                st = torch.cuda.current_stream().cuda_stream
                calls = [
                    comm.call(
                        "ncclAllReduce",
                        ptrs[k % slots][1 if in_place else 0],
                        ptrs[k % slots][1],
                        n,
                        FLOAT,
                        0,
                        stream=st,
                    )
                    for k in range(count)
                ]
                comm.issue(calls)

            return work

        def torch_work(kind):
            def work():
                for k in range(CALLS):
                    s, r = pairs[k % slots]
                    if kind in ("copy", "copy+ar"):
                        r.copy_(s)
                    if kind in ("ar", "copy+ar"):
                        dist.all_reduce(r, op=SUM, group=group)
                    if kind == "ag":
                        dist.all_gather_into_tensor(r, s, group=group)

            return work

        works = {
            "raw-out": raw(False),
            "raw-in": raw(True),
            "torch-in": torch_work("ar"),
            "torch-copy": torch_work("copy"),
            "torch-out": torch_work("copy+ar"),
            "torch-allgather-out": torch_work("ag"),
            "raw-out-20": raw(False, 20),
        }
        for name, work in works.items():
            try:
                keep(doc, "graph", graph_row(name, work, n), out_path)
            except Exception as exc:
                keep(
                    doc,
                    "graph",
                    {"variant": name, "size_bytes": n * 4, "error": repr(exc)[:300]},
                    out_path,
                )
    comm.destroy()
    dist.destroy_process_group()
    out_path.write_text(json.dumps(doc, indent=1))
    return 0


def _cupy_all_reduce(side):
    """(a function issuing prepared all-reduces through cupy's binding, why not), on a
    communicator of cupy's own."""
    try:
        from cupy.cuda import nccl as cupy_nccl

        cupy_comm = cupy_nccl.NcclCommunicator(1, cupy_nccl.get_unique_id(), 0)
    except Exception as exc:  # cupy absent or unusable: the other loops are still measured
        return None, f"{type(exc).__name__}: {exc}"[:300]

    kind, op, stream = cupy_nccl.NCCL_FLOAT32, cupy_nccl.NCCL_SUM, side.cuda_stream

    def issue(prepared):  # every lookup out of the loop: cupy's binding at its cheapest
        call = cupy_comm.allReduce
        for send, recv, count in prepared:
            call(send, recv, count, kind, op, stream)

    return issue, None


ROUNDS = 5


def issue_loops(doc, comm, side, out_path) -> None:
    """The raw path's issue loops on the same prepared calls, alternated (module docstring)."""
    from ncclprobe import envvars
    from ncclprobe.probes import issue_loop

    os.environ[envvars.ISSUE_LOOP] = issue_loop.C  # the C loop or a refusal: never ctypes unasked
    cupy_issue, cupy_why = _cupy_all_reduce(side)
    doc["issue_loops"], doc["cupy_unavailable"] = [], cupy_why
    doc["libnccl_mapped"] = sorted(
        {line.rsplit(None, 1)[-1] for line in open("/proc/self/maps") if "libnccl" in line}
    )
    FLOAT = nc.DATA_TYPES["float32"]
    for size in (8, 256 << 10):
        n = max(1, size // 4)
        pairs = [
            (torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")) for _ in range(CALLS)
        ]
        for in_place in (False, True):
            prepared = [
                (r.data_ptr() if in_place else s.data_ptr(), r.data_ptr(), n) for s, r in pairs
            ]
            calls = [
                comm.call("ncclAllReduce", a, b, c, FLOAT, 0, stream=side.cuda_stream)
                for a, b, c in prepared
            ]
            loops = {
                "c-loop": comm.batch(calls).run,
                "ctypes": lambda calls=calls: comm.issue(calls),
            }
            if cupy_issue is not None:
                loops["cupy"] = lambda prepared=prepared: cupy_issue(prepared)
            for k in range(ROUNDS):
                for name, issue in loops.items():
                    for _ in range(WARMUP // CALLS + 1):
                        issue()
                    row = {"loop": name, "size_bytes": n * 4, "in_place": in_place, "round": k}
                    keep(doc, "issue_loops", {**row, **timed(issue, side)}, out_path)


def graph_layouts(doc, comm, out_path) -> None:
    """100 raw out-of-place all-reduces in one graph, per size: the rotating buffers as separate
    allocations or as one allocation per buffer (nccl-tests' shifted pointers), or one slot (L2-hot),
    the replays on torch's legacy default stream or on a non-blocking stream (nccl-tests')."""
    from ncclprobe.cudagraph import capture_graph

    FLOAT = nc.DATA_TYPES["float32"]
    for size in GRAPH_SIZES:
        n = max(1, size // 4)
        slots = min(CALLS, (128 << 20) // (n * 4))
        separate = [
            (torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")) for _ in range(slots)
        ]
        sends, recvs = torch.ones(slots, n, device="cuda"), torch.zeros(slots, n, device="cuda")
        layouts = {
            "separate": [(s.data_ptr(), r.data_ptr()) for s, r in separate],
            "contiguous": [(sends[k].data_ptr(), recvs[k].data_ptr()) for k in range(slots)],
            "one-slot": [(sends[0].data_ptr(), recvs[0].data_ptr())],
        }
        for layout, ptrs in layouts.items():

            def work(ptrs=ptrs):
                st = torch.cuda.current_stream().cuda_stream
                comm.issue(
                    [
                        comm.call("ncclAllReduce", *ptrs[k % len(ptrs)], n, FLOAT, 0, stream=st)
                        for k in range(CALLS)
                    ]
                )

            graph, _ = capture_graph(work)
            for where in ("legacy-default", "non-blocking"):
                stream = (
                    torch.cuda.current_stream()
                    if where == "legacy-default"
                    else torch.cuda.Stream()
                )
                row = {"layout": layout, "replay_stream": where, "size_bytes": n * 4}
                try:
                    row.update(replays(graph, stream))
                except Exception as exc:
                    row["error"] = repr(exc)[:300]
                keep(doc, "layouts", row, out_path)
            del graph


def replays(graph, stream) -> dict:
    """Per call: CUDA events around one replay (5 trials), and the wall clock over 100 replays
    then a sync (nccl-tests -G 100's clock)."""
    with torch.cuda.stream(stream):
        for _ in range(3):
            graph.replay()
        by_events = []
        for _ in range(TRIALS):
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            graph.replay()
            b.record(stream)
            b.synchronize()
            by_events.append(a.elapsed_time(b) * 1e3 / CALLS)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(100):
            graph.replay()
        stream.synchronize()
        wall = (time.perf_counter() - t0) * 1e6 / (100 * CALLS)
    return {
        "events_us": round(statistics.median(by_events), 4),
        "events_us_min": round(min(by_events), 4),
        "events_us_max": round(max(by_events), 4),
        "wall_G100_us": round(wall, 4),
    }


def keep(doc, part, row, out_path) -> None:
    """Every row is written as soon as it exists: a later failure loses nothing."""
    doc[part].append(row)
    print(json.dumps(row), flush=True)
    out_path.write_text(json.dumps(doc, indent=1))


def graph_row(name, work, n) -> dict:
    from ncclprobe.cudagraph import capture_graph

    graph, _ = capture_graph(work)
    count = 20 if name.endswith("-20") else CALLS
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    by_events = []
    for _ in range(TRIALS):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        by_events.append(a.elapsed_time(b) * 1e3 / count)
    walls = {}
    for launches in (1, 10, 100):
        spans = []
        for _ in range(TRIALS):
            torch.cuda.synchronize()
            cur = torch.cuda.current_stream()
            t0 = time.perf_counter()
            for _ in range(launches):
                graph.replay()
            while not cur.query():
                pass
            spans.append((time.perf_counter() - t0) * 1e6 / (launches * count))
        walls[f"wall_G{launches}_us"] = round(statistics.median(spans), 4)
    return {
        "variant": name,
        "size_bytes": n * 4,
        "calls_per_graph": count,
        "events_us": round(statistics.median(by_events), 4),
        "events_us_min": round(min(by_events), 4),
        "events_us_max": round(max(by_events), 4),
        **walls,
    }


if __name__ == "__main__":
    sys.exit(main())
