"""Workspaces every rank maps: cuMemAlloc'd memory shared through CUDA IPC handles.

Why the driver API through ctypes and not torch tensors: an IPC handle names a whole cudaMalloc
allocation, and torch's caching allocator hands out pieces of larger ones; torch's own sharing
(`torch.multiprocessing.reductions`) copes with that, but it opens a peer's handle under the
*peer's* device, so the lazy peer access it asks for is enabled for the wrong device pair. Opening
the handle here, with this rank's device current, enables exactly the access its kernels need
(`CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`), and a dedicated allocation has no offset to get wrong.

CUDA IPC rules this follows: a process never opens its own handle (it uses its own pointer);
every rank zeroes its workspace and synchronizes before any handle leaves the process, so no
peer can signal into memory that is zeroed afterwards; mappings are closed before their owner
frees the memory (`close` is collective: a barrier separates the two steps). Two processes on one
GPU may map each other's memory the same way (no peer access is needed there).

`libcuda.so.1` is the driver's own library, present wherever a CUDA GPU works.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
HANDLE_BYTES = 64


class IpcError(RuntimeError):
    """A driver call failed; the message names the call and the driver's reason."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class Driver:
    """The few CUDA driver calls the workspace needs, each checked."""

    # bound in __init__ (`_bind`, the _v2 entry points under their plain names): each returns a
    # CUresult, 0 on success
    cuMemAlloc: Callable[..., int]
    cuMemFree: Callable[..., int]
    cuMemsetD8: Callable[..., int]
    cuMemcpyDtoH: Callable[..., int]
    cuCtxSynchronize: Callable[..., int]
    cuCtxGetCurrent: Callable[..., int]
    cuIpcGetMemHandle: Callable[..., int]
    cuIpcOpenMemHandle: Callable[..., int]
    cuIpcCloseMemHandle: Callable[..., int]
    cuGetErrorString: Callable[..., int]

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise IpcError(f"cannot load the CUDA driver library libcuda.so.1 ({exc})") from None
        u64, size = ctypes.c_uint64, ctypes.c_size_t
        self._bind("cuMemAlloc_v2", [ctypes.POINTER(u64), size])
        self._bind("cuMemFree_v2", [u64])
        self._bind("cuMemsetD8_v2", [u64, ctypes.c_ubyte, size])
        self._bind("cuMemcpyDtoH_v2", [ctypes.c_void_p, u64, size])
        self._bind("cuCtxSynchronize", [])
        self._bind("cuCtxGetCurrent", [ctypes.POINTER(ctypes.c_void_p)])
        self._bind("cuIpcGetMemHandle", [ctypes.POINTER(_Handle), u64])
        self._bind(
            "cuIpcOpenMemHandle_v2",
            [ctypes.POINTER(u64), _Handle, ctypes.c_uint],
            fallback="cuIpcOpenMemHandle",
        )
        self._bind("cuIpcCloseMemHandle", [u64])
        self._bind("cuGetErrorString", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])

    def _bind(self, name: str, argtypes: list, fallback: str | None = None) -> None:
        fn = getattr(self.lib, name, None) or (
            getattr(self.lib, fallback, None) if fallback else None
        )
        if fn is None:
            raise IpcError(f"the CUDA driver library has no {name}")
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        setattr(self, name.removesuffix("_v2"), fn)

    def check(self, code: int, call: str) -> None:
        if code != 0:
            text = ctypes.c_char_p()
            self.cuGetErrorString(code, ctypes.byref(text))
            reason = text.value.decode() if text.value else f"error {code}"
            raise IpcError(f"{call} failed: {reason}")

    def require_context(self) -> None:
        """The driver calls act on the calling thread's current context (torch's, once it made one)."""
        ctx = ctypes.c_void_p()
        self.check(self.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            raise IpcError(
                "no CUDA context is current on this thread (touch the device with torch first)"
            )


class Workspace:
    """This rank's zeroed allocation and every peer's mapping of theirs, as raw device addresses."""

    def __init__(self, driver: Driver, nbytes: int):
        driver.require_context()
        self.driver, self.nbytes = driver, nbytes
        self.own = ctypes.c_uint64()
        driver.check(driver.cuMemAlloc(ctypes.byref(self.own), nbytes), f"cuMemAlloc({nbytes})")
        driver.check(driver.cuMemsetD8(self.own, 0, nbytes), "cuMemsetD8")
        driver.check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
        self.addresses: list[int] = []
        self._opened: list[int] = []

    def handle(self) -> bytes:
        """The IPC handle of this rank's allocation, to send to the peers."""
        out = _Handle()
        self.driver.check(
            self.driver.cuIpcGetMemHandle(ctypes.byref(out), self.own), "cuIpcGetMemHandle"
        )
        return ctypes.string_at(ctypes.addressof(out), HANDLE_BYTES)

    def open(self, handles: list[bytes], rank: int) -> list[int]:
        """Map every peer's allocation (never our own) with this rank's device current."""
        addresses = []
        for peer, raw in enumerate(handles):
            if peer == rank:
                addresses.append(self.own.value)
                continue
            mapped = ctypes.c_uint64()
            self.driver.check(
                self.driver.cuIpcOpenMemHandle(
                    ctypes.byref(mapped),
                    _Handle.from_buffer_copy(raw),
                    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
                ),
                f"cuIpcOpenMemHandle(rank {peer}'s workspace)",
            )
            self._opened.append(mapped.value)
            addresses.append(mapped.value)
        self.addresses = addresses
        return addresses

    def read_int32(self, offset: int) -> int:
        value = ctypes.c_int32()
        self.driver.check(
            self.driver.cuMemcpyDtoH(ctypes.byref(value), self.own.value + offset, 4),
            "cuMemcpyDtoH",
        )
        return value.value

    def close_peers(self) -> None:
        """First half of teardown: unmap the peers' memory (after every rank stopped using it)."""
        while self._opened:
            self.driver.check(
                self.driver.cuIpcCloseMemHandle(self._opened.pop()), "cuIpcCloseMemHandle"
            )

    def free(self) -> None:
        """Second half: free our own allocation (after every peer unmapped it)."""
        if self.own.value:
            self.driver.check(self.driver.cuMemFree(self.own), "cuMemFree")
            self.own = ctypes.c_uint64()
