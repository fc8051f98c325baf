"""The all-reduce paths the probe compares, one small class each (worker side, GPU only).

Every method has the same life, and the worker (custom_allreduce) makes the ranks agree after
each stage that can fail, so a failure on one rank never leaves another waiting in a collective:
  `prepare()`  local setup (imports, allocation); raises when the method cannot run here;
  `connect()`  the collective part (exchanging handles, a rendezvous); every rank calls it;
  `bind(n, dtype)`  buffers and compilation for one message size; local;
  `call()`     one all-reduce; returns the tensor holding the result (the same tensor every call,
               so a CUDA graph can capture it);
  `failure()`  after a synchronize: why the last calls cannot be trusted, or None;
  `describe()` what exactly runs (which op, which variant), for the document;
  `close()`    at the end, on every rank alike (collective where the method is).

- `nccl`: torch.distributed.all_reduce in place, as engines call it.
- `ipc-oneshot`, `ipc-twoshot`: our Triton kernels (custom_allreduce_kernel) over CUDA IPC
  workspaces (custom_allreduce_ipc); the kernel copies the input into the workspace itself, as
  vLLM's eager path copies it into its registered buffer. The two share one workspace, so when
  one fails the other goes with it (`group`).
- `symm-oneshot`, `symm-twoshot`: torch's symmetric-memory ops
  (`torch.ops.symm_mem.one_shot_all_reduce`, `two_shot_all_reduce_`) on a buffer from
  `torch.distributed._symmetric_memory`, the input copied in first. Multicast is never used:
  the pool sets TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and no multimem op is called.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist

from ncclprobe.probes.custom_allreduce_plan import METHODS

if TYPE_CHECKING:  # imported where prepared: they need Triton and the CUDA driver
    from ncclprobe.probes.custom_allreduce_ipc import Workspace

NCCL, IPC_ONESHOT, IPC_TWOSHOT, SYMM_ONESHOT, SYMM_TWOSHOT = METHODS


class Unavailable(RuntimeError):
    """This method cannot run here; the message says why, in full."""


class Method(Protocol):
    """One all-reduce path and its life (the module docstring)."""

    @property
    def name(self) -> str: ...
    @property
    def group(self) -> str | None:
        """Methods that fail together (one shared workspace)."""

    def prepare(self) -> None: ...
    def connect(self) -> None: ...
    def bind(self, n: int, dtype: Any) -> None: ...
    def call(self) -> torch.Tensor: ...
    def failure(self) -> str | None: ...
    def describe(self) -> str: ...
    def close(self) -> None: ...


class Nccl:
    name, group = NCCL, None

    def __init__(self, ctx):
        self.ctx = ctx

    def prepare(self) -> None:
        pass

    def connect(self) -> None:
        pass

    def bind(self, n: int, dtype) -> None:
        self.inp = torch.empty(n, dtype=dtype, device=self.ctx.device)

    def call(self):
        dist.all_reduce(self.inp)
        return self.inp

    def failure(self) -> str | None:
        return None

    def describe(self) -> str:
        version = torch.cuda.nccl.version()
        version = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        return f"torch.distributed.all_reduce in place, NCCL {version}"

    def close(self) -> None:
        pass


class IpcShared:
    """One workspace per rank, mapped by all, shared by the one-shot and two-shot kernels (the
    ranks run the same kernels in the same order, so their barrier counts stay in step). Each
    stage runs once, for whichever IPC method asks first; a later ask repeats this rank's outcome
    (the worker's agreement between stages makes a failure on any rank count for all)."""

    def __init__(self, ctx, max_bytes: int, max_spins: int):
        from ncclprobe.probes.custom_allreduce_kernel import Layout

        self.ctx, self.max_spins, self.layout = ctx, max_spins, Layout(max_bytes=max_bytes)
        self.workspace: Workspace | None = None
        self.bases: torch.Tensor | None = None  # every rank's workspace address, once connected
        self.error: str | None = None
        self.prepared = self.connected = False

    def prepare(self) -> None:
        if not self.prepared:
            self.prepared = True
            try:
                from ncclprobe.probes import custom_allreduce_kernel  # noqa: F401  (Triton must import)
                from ncclprobe.probes.custom_allreduce_ipc import Driver, Workspace

                self.workspace = workspace = Workspace(Driver(), self.layout.total)
                self.handle = workspace.handle()
            except Exception as exc:  # noqa: BLE001  (Triton missing, no driver, allocation refused)
                self.error = f"CUDA IPC workspace: {type(exc).__name__}: {exc}"
        if self.error:
            raise Unavailable(self.error)

    def connect(self) -> None:
        if not self.connected:
            self.connected = True
            handles: list[Any] = [None] * self.ctx.world_size  # every rank's, as bytes
            dist.all_gather_object(handles, self.handle, group=self.ctx.control_group())
            try:
                assert self.workspace is not None  # prepare() made it, or raised
                self.bases = torch.tensor(
                    self.workspace.open(handles, self.ctx.rank),
                    dtype=torch.int64,
                    device=self.ctx.device,
                )
            except Exception as exc:  # noqa: BLE001  (the driver refused a peer's handle)
                self.error = f"CUDA IPC mapping: {type(exc).__name__}: {exc}"
        if self.error:
            raise Unavailable(self.error)

    def status(self) -> int:
        assert self.workspace is not None, "prepare() first"
        return self.workspace.read_int32(self.layout.status)

    def close(self) -> None:
        """Collective whenever prepare ran (it runs on every rank alike): unmap, then free."""
        if not self.prepared:
            return
        torch.cuda.synchronize()
        dist.barrier(group=self.ctx.control_group())
        if self.workspace is not None:
            self.workspace.close_peers()
        dist.barrier(group=self.ctx.control_group())
        if self.workspace is not None:
            self.workspace.free()
        self.workspace, self.prepared = None, False


class IpcAllReduce:
    group = "ipc"

    def __init__(self, name: str, shared: IpcShared, max_blocks: int):
        from ncclprobe.probes.custom_allreduce_kernel import ONE_SHOT, TWO_SHOT

        self.name, self.shared = name, shared
        self.algorithm = ONE_SHOT if name == IPC_ONESHOT else TWO_SHOT
        self.max_blocks = (
            max_blocks or torch.cuda.get_device_properties(shared.ctx.device).multi_processor_count
        )

    def prepare(self) -> None:
        self.shared.prepare()

    def connect(self) -> None:
        self.shared.connect()

    def bind(self, n: int, dtype) -> None:
        device = self.shared.ctx.device
        self.inp = torch.empty(n, dtype=dtype, device=device)
        self.out = torch.empty(n, dtype=dtype, device=device)
        self._launch(warmup=True)  # compile now: no rank spins in a barrier while a peer compiles

    def _launch(self, warmup: bool = False):
        from ncclprobe.probes.custom_allreduce_kernel import launch

        s = self.shared
        return launch(
            self.algorithm,
            self.inp,
            self.out,
            s.bases,
            s.ctx.rank,
            s.ctx.world_size,
            s.layout,
            s.max_spins,
            max_blocks=self.max_blocks,
            warmup=warmup,
        )

    def call(self):
        self._launch()
        return self.out

    def failure(self) -> str | None:
        from ncclprobe.probes.custom_allreduce_kernel import describe_status

        return describe_status(self.shared.status())

    def describe(self) -> str:
        from ncclprobe.probes.custom_allreduce_kernel import BLOCK, MAX_BLOCKS

        return (
            f"Triton {self.algorithm} kernel over CUDA IPC workspaces (copy-in fused), at most "
            f"{min(self.max_blocks, MAX_BLOCKS)} blocks of {BLOCK} elements"
        )

    def close(self) -> None:
        pass  # the shared workspace closes once, after both kernels


class SymmMem:
    group = None

    def __init__(self, name: str, ctx, max_bytes: int):
        self.name, self.ctx, self.max_bytes = name, ctx, max_bytes
        self.buffer: torch.Tensor | None = None  # the symmetric buffer, once prepared
        self.handle: Any = None  # its rendezvous handle, once connected

    def prepare(self) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.op_name = (
            "one_shot_all_reduce" if self.name == SYMM_ONESHOT else "two_shot_all_reduce_"
        )
        self.op = getattr(torch.ops.symm_mem, self.op_name)  # absent from builds without CUDA 12.3+
        world = dist.group.WORLD
        assert world is not None, "the worker initialised torch.distributed"
        self.group_name = world.group_name
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:  # required up to torch 2.7, a deprecated no-op after
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(self.group_name)
        self.buffer = symm_mem.empty(self.max_bytes, dtype=torch.uint8, device=self.ctx.device)

    def _buffer(self) -> torch.Tensor:
        assert self.buffer is not None, "prepare() first"
        return self.buffer

    def connect(self) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.handle = symm_mem.rendezvous(self._buffer(), self.group_name)
        torch.cuda.synchronize()

    def bind(self, n: int, dtype) -> None:
        self.inp = torch.empty(n, dtype=dtype, device=self.ctx.device)
        self.view = self._buffer().view(dtype)[:n]

    def call(self):
        self.view.copy_(self.inp)
        if self.name == SYMM_ONESHOT:
            return self.op(self.view, "sum", self.group_name)
        self.op(self.view, "sum", self.group_name)
        return self.view

    def failure(self) -> str | None:
        return None  # a hang in its kernels is ended by the launcher's silence timeout

    def describe(self) -> str:
        import torch.distributed._symmetric_memory as symm_mem

        backend = (
            getattr(symm_mem, "get_backend", lambda device: None)(self.ctx.device) or "default"
        )
        return (
            f"torch.ops.symm_mem.{self.op_name} on a symmetric-memory buffer ({backend} backend), "
            "input copied in first"
        )

    def close(self) -> None:
        self.buffer = self.handle = None


def build(ctx, names: list[str], max_bytes: int, options: dict) -> tuple[list[Method], IpcShared]:
    """The methods asked for, in the order given; the IPC pair share one workspace."""
    shared = IpcShared(ctx, max_bytes, options["max_spins"])
    made: list[Method] = []
    for name in names:
        if name == NCCL:
            made.append(Nccl(ctx))
        elif name in (IPC_ONESHOT, IPC_TWOSHOT):
            made.append(IpcAllReduce(name, shared, options["max_blocks"]))
        elif name in (SYMM_ONESHOT, SYMM_TWOSHOT):
            made.append(SymmMem(name, ctx, max_bytes))
        else:
            raise ValueError(f"unknown method {name!r}")
    return made, shared
