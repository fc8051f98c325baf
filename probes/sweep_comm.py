"""The two ways the sweep issues a collective: torch.distributed, or a raw NCCL communicator.

`TorchComm` is what inference engines use: ProcessGroupNCCL's dispatch on the host (about 18 µs per
eager call on the H200, before the sweep's own per-iteration events) and, inside a CUDA graph, the
stream dependencies torch adds around each collective. `NcclComm` calls NCCL itself through cupy's
binding on the current stream, as nccl-tests does: no torch dispatch, real out-of-place calls.
Both are created fresh per
configuration (NCCL reads its per-communicator variables at creation) and both log to the same
NCCL_DEBUG_FILE, so the proof is read the same way.

`group(m)` issues m collectives as one NCCL group (nccl-tests `-m`): ncclGroupStart/End for the
raw path, torch's coalescing manager for torch; gloo has no groups, so there the m collectives
run back to back (and the record says so).
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

GLOO_AGG_NOTE = "gloo has no grouped launch: the aggregated collectives ran back to back"


class TorchComm:
    path = "torch"

    def __init__(self, ctx):
        self.ctx = ctx
        self.group = dist.new_group(list(range(ctx.world_size)), backend=ctx.backend)

    def bind(self, shape, dtype: str) -> None:
        """torch reads counts from the tensors."""

    def launch(self, coll, send, recv, in_place: bool, op: str) -> None:
        coll.launch(send, recv, self.group, in_place, op)

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

    def __init__(self, ctx):
        import cupy
        from cupy.cuda import nccl

        cupy.cuda.Device(ctx.device.index).use()
        holder = [nccl.get_unique_id() if ctx.rank == 0 else None]
        if ctx.world_size > 1:  # the unique id travels over the gloo control group, never NCCL
            dist.broadcast_object_list(holder, src=0, group=ctx.control_group())
        self.nccl = nccl
        self.comm = nccl.NcclCommunicator(ctx.world_size, holder[0], ctx.rank)

    def launch(self, coll, send, recv, in_place: bool, op: str) -> None:
        coll.launch_nccl(
            self.comm,
            send,
            recv,
            self._shape,
            self._dtype,
            op,
            torch.cuda.current_stream().cuda_stream,
        )

    def bind(self, shape, dtype: str) -> None:
        """The shape and dtype the next launches use (the raw call needs counts, not tensors)."""
        self._shape, self._dtype = shape, dtype

    @contextlib.contextmanager
    def grouped(self, m: int):
        if m <= 1:
            yield
            return
        self.nccl.groupStart()
        try:
            yield
        finally:
            self.nccl.groupEnd()

    def close(self) -> None:
        torch.cuda.synchronize()
        self.comm.destroy()


def open_comm(ctx, path: str):
    return NcclComm(ctx) if path == "nccl" else TorchComm(ctx)
