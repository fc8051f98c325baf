"""The two ways the sweep issues a collective: torch.distributed, or a raw NCCL communicator.

`TorchComm` is what inference engines use: ProcessGroupNCCL's dispatch on the host and, inside a
CUDA graph, the stream dependencies torch adds around each collective. `NcclComm` makes
nccl-tests' own calls (`Collective.nccl_calls`) through ctypes against the libnccl torch loaded
(`probes.nccl_ctypes`): no torch dispatch, real out-of-place calls. Both are created fresh per
configuration (NCCL reads its per-communicator variables at creation) and both log to the same
NCCL_DEBUG_FILE, so the proof is read the same way.

A timed trial is `prepare`d before the clock starts, as nccl-tests issues its loop (src/common.cu
`BenchTime`): on the raw path every pointer, count, the comm and the stream handle are converted
once into ready ctypes calls, so issuing the trial is one C call per NCCL call and nothing else;
its per-iteration events (`events=True`) are cudaEventRecord calls in the same list. The raw
path issues on a stream of its own (nccl-tests creates one, non-blocking), not torch's legacy
default stream.

`agg` > 1 issues that many collectives per iteration as one NCCL group (nccl-tests `-m`):
ncclGroupStart/End on the raw path, torch's coalescing manager on torch; gloo has no groups, so
there the collectives run back to back (and the record says so).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.distributed as dist

from ncclprobe.probes import nccl_ctypes

GLOO_AGG_NOTE = "gloo has no grouped launch: the aggregated collectives ran back to back"
_KEYS = itertools.count()


class Batch(NamedTuple):
    """One trial, ready: `issue()` issues it; events go on `stream`; `marks` are recorded after
    each iteration (empty without per-iteration events); `issued_by` says what issues the raw
    path's calls (the C loop or ctypes, `probes.issue_loop`) and `issued_by_why` why not the C
    loop (empty when it did)."""

    issue: Callable[[], None]
    stream: object
    marks: list
    issued_by: str | None = None
    issued_by_why: str = ""


def _marks(count: int, stream) -> list:
    """Timing events, each recorded once so CUDA has created it (torch creates events lazily)."""
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for mark in marks:
        mark.record(stream)
    return marks


class TorchComm:
    path = "torch"

    def __init__(self, ctx):
        self.ctx = ctx
        self.group = dist.new_group(list(range(ctx.world_size)), backend=ctx.backend)

    def bind(self, shape, dtype: str) -> None:
        """torch reads counts from the tensors."""

    def launch(self, coll, send, recv, in_place: bool, op: str) -> None:
        coll.launch(send, recv, self.group, in_place, op)

    def iteration(self, coll, pairs, k: int, agg: int, in_place: bool, op: str) -> None:
        """The k-th iteration: `agg` collectives in one group, each on its own buffer pair."""
        with self.grouped(agg):
            for j in range(agg):
                send, recv = pairs[(k * agg + j) % len(pairs)]
                coll.launch(send, recv, self.group, in_place, op)

    def prepare(self, coll, pairs, iters, agg, in_place, op, *, events=False) -> Batch:
        stream = torch.cuda.current_stream() if self.ctx.backend == "nccl" else None
        marks = _marks(iters, stream) if events else []

        def issue() -> None:
            for k in range(iters):
                self.iteration(coll, pairs, k, agg, in_place, op)
                if marks:
                    marks[k].record(stream)

        return Batch(issue, stream, marks)

    @contextlib.contextmanager
    def grouped(self, m: int):
        if m <= 1 or self.ctx.backend != "nccl":
            yield
            return
        with dist._coalescing_manager(
            group=self.group, device=self.ctx.device, async_ops=True
        ) as cm:
            yield
        cm.wait()

    def close(self) -> None:
        dist.destroy_process_group(self.group)


class NcclComm:
    path = "nccl"

    def __init__(self, ctx, lib: nccl_ctypes.Library | None = None):
        self.ctx = ctx
        self.lib = lib or nccl_ctypes.Library()
        self.stream = torch.cuda.Stream(device=ctx.device)  # also starts torch's CUDA context
        unique_id = exchange_unique_id(ctx, self.lib)
        self.comm = nccl_ctypes.Communicator(self.lib, ctx.world_size, unique_id, ctx.rank)
        self._record = nccl_ctypes.cuda_event_record()

    def bind(self, shape, dtype: str) -> None:
        """The shape and dtype the next launches use (the raw call needs counts, not tensors)."""
        self._shape, self._dtype = shape, dtype

    def _calls(self, coll, send: int, recv: int, op: str, stream: int) -> list:
        return [
            self.comm.call(name, *values, stream=stream)
            for name, values in coll.nccl_calls(
                send,
                recv,
                self._shape,
                self._dtype,
                op,
                self.ctx.rank,
                self.ctx.world_size,
                self.lib.version,
            )
        ]

    def launch(self, coll, send, recv, in_place: bool, op: str) -> None:
        """One collective on torch's current stream (the correctness pass, a capture)."""
        stream = torch.cuda.current_stream().cuda_stream
        self.comm.issue(self._calls(coll, send.data_ptr(), recv.data_ptr(), op, stream))

    def prepare(self, coll, pairs, iters, agg, in_place, op, *, events=False, current=False):
        """The trial's calls, ready; on the raw path's own stream, or on torch's current stream
        (`current`: inside a graph capture)."""
        stream = torch.cuda.current_stream() if current else self.stream
        handle = stream.cuda_stream
        per_pair = [self._calls(coll, s.data_ptr(), r.data_ptr(), op, handle) for s, r in pairs]
        start = [self.comm.call("ncclGroupStart")] if agg > 1 else []
        end = [self.comm.call("ncclGroupEnd")] if agg > 1 else []
        marks = _marks(iters, stream) if events else []
        calls = []
        for k in range(iters):
            calls += start
            for j in range(agg):
                calls += per_pair[(k * agg + j) % len(per_pair)]
            calls += end
            if marks:
                calls.append(self._mark(marks[k], stream, handle))
        issuer = self.comm.batch(calls)
        return Batch(issuer.run, stream, marks, issuer.issued_by, issuer.why)

    def _mark(self, mark, stream, handle: int) -> nccl_ctypes.Call:
        if self._record is None:  # no libcudart mapped: torch's own record (a Python call)
            return nccl_ctypes.Call("Event.record", lambda: mark.record(stream), ())
        return self._record(mark.cuda_event, handle)

    def close(self) -> None:
        torch.cuda.synchronize()
        self.comm.destroy()


def exchange_unique_id(ctx, lib: nccl_ctypes.Library) -> bytes:
    """Rank 0's ncclUniqueId, through the launcher's store (torch's default store: the launcher's
    TCPStore, or torchrun's): raw bytes, never pickled."""
    if ctx.world_size == 1:
        return lib.unique_id()
    store = dist.distributed_c10d._get_default_store()
    key = f"ncclprobe/raw-nccl-id/{next(_KEYS)}"  # every rank opens its communicators in order
    if ctx.rank == 0:
        unique_id = lib.unique_id()
        store.set(key, unique_id)  # type: ignore[arg-type]  # bytes are stored as is (torch's stub says str)
        return unique_id
    return bytes(store.get(key))


def open_comm(ctx, path: str):
    return NcclComm(ctx) if path == "nccl" else TorchComm(ctx)
