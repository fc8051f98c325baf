"""NCCL called directly through ctypes, against the libnccl that torch already loaded.

Why: the raw path (`sweep --path nccl`) exists to time what nccl-tests times, an NCCL call issued
back to back from compiled code. ctypes is in the standard library and torch's CUDA wheels ship
libnccl (the `nvidia-nccl` wheel), so this needs no compiler and no extra package on the user's
machine. What a call costs the host here is measured, not assumed (docs/LOG.md 2026-12-01).

How the hot loop stays cheap: `Communicator.call` converts every argument once, through the
header's own types (`SIGNATURES`), into ctypes objects, and returns a `Call` (an untyped function
pointer and its ready arguments). A batch of calls is a flat list, issued by `issue_loop`: one
call into C for the whole batch where its C loop is built, else `fn(*args)` per entry and a test
of the returned ncclResult_t.

The facts below are NCCL's public header (src/nccl.h.in, v2.28.9-1); tests/test_nccl_ctypes.py
checks them against a hand copy of that header's declarations.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import NamedTuple, NoReturn

from ncclprobe.probes import issue_loop

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
RESULTS = (
    "ncclSuccess",
    "ncclUnhandledCudaError",
    "ncclSystemError",
    "ncclInternalError",
    "ncclInvalidArgument",
    "ncclInvalidUsage",
    "ncclRemoteError",
    "ncclInProgress",
)
# ncclDataType_t, by torch's dtype name; float8 needs NCCL 2.24+
DATA_TYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
    "float8_e4m3fn": 10,
    "float8_e5m2": 11,
}
RED_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}  # ncclRedOp_t
ALLTOALL_SINCE = 22800  # ncclAlltoAll first shipped in NCCL 2.28.0


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank."""

    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


_P, _SIZE, _INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
# Every entry point used, with its parameters in the header's order. Those ending in
# (comm, stream) are enqueued on a stream: COMM_STREAM.
SIGNATURES: dict[str, tuple] = {
    "ncclGetVersion": (ctypes.POINTER(_INT),),
    "ncclGetUniqueId": (ctypes.POINTER(UniqueId),),
    "ncclCommInitRank": (ctypes.POINTER(_P), _INT, UniqueId, _INT),
    "ncclCommDestroy": (_P,),
    "ncclCommAbort": (_P,),
    "ncclGroupStart": (),
    "ncclGroupEnd": (),
    # sendbuff, recvbuff, count, datatype, op, comm, stream
    "ncclAllReduce": (_P, _P, _SIZE, _INT, _INT, _P, _P),
    # sendbuff, recvbuff, sendcount, datatype, comm, stream
    "ncclAllGather": (_P, _P, _SIZE, _INT, _P, _P),
    # sendbuff, recvbuff, recvcount, datatype, op, comm, stream
    "ncclReduceScatter": (_P, _P, _SIZE, _INT, _INT, _P, _P),
    # sendbuff, recvbuff, count, datatype, root, comm, stream
    "ncclBroadcast": (_P, _P, _SIZE, _INT, _INT, _P, _P),
    # sendbuff, recvbuff, count, datatype, op, root, comm, stream
    "ncclReduce": (_P, _P, _SIZE, _INT, _INT, _INT, _P, _P),
    # sendbuff, recvbuff, count (per peer), datatype, comm, stream
    "ncclAlltoAll": (_P, _P, _SIZE, _INT, _P, _P),
    # sendbuff, count, datatype, peer, comm, stream
    "ncclSend": (_P, _SIZE, _INT, _INT, _P, _P),
    # recvbuff, count, datatype, peer, comm, stream
    "ncclRecv": (_P, _SIZE, _INT, _INT, _P, _P),
}
COMM_STREAM = frozenset(
    name for name, params in SIGNATURES.items() if params[-2:] == (_P, _P) and len(params) > 2
)


class NcclError(RuntimeError):
    """An NCCL call returned something other than ncclSuccess."""


class Call(NamedTuple):
    """One ready call: an untyped function pointer and its arguments, already ctypes objects."""

    name: str
    fn: object
    args: tuple


def mapped(name: str, maps: str = "/proc/self/maps") -> str | None:
    """The path of a shared library this process has mapped whose file name starts with `name`."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if Path(path).name.startswith(name) and os.path.exists(path):
                    return path
    except OSError:
        pass
    return None


def library_path(maps: str = "/proc/self/maps") -> str:
    """The libnccl this process already mapped (torch's: one NCCL in the process), else the
    nvidia-nccl wheel's, else whatever the loader finds."""
    found = mapped("libnccl.so", maps)
    if found:
        return found
    try:
        import nvidia.nccl

        wheel = Path(list(nvidia.nccl.__path__)[0]) / "lib" / "libnccl.so.2"
        if wheel.exists():
            return str(wheel)
    except ImportError:
        pass
    import ctypes.util

    found = ctypes.util.find_library("nccl")
    if not found:
        raise NcclError(
            "no libnccl found: torch did not load one and neither the nvidia-nccl wheel nor the "
            "system loader has it"
        )
    return found


def version_text(code: int) -> str:
    """NCCL's version code (major*10000 + minor*100 + patch since 2.9) as 2.28.9."""
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


class Library:
    """libnccl's entry points: typed ones for setup, untyped ones for the hot loop."""

    def __init__(self, path: str | None = None):
        self.path = path or library_path()
        self._lib = ctypes.CDLL(self.path)
        self._typed = {}
        for name, params in SIGNATURES.items():
            try:
                fn = self._lib[name]
            except AttributeError:  # an older NCCL (ncclAlltoAll before 2.28)
                continue
            fn.argtypes, fn.restype = list(params), ctypes.c_int
            self._typed[name] = fn
        self._error_string = self._lib.ncclGetErrorString
        self._error_string.argtypes, self._error_string.restype = [_INT], ctypes.c_char_p
        self._last_error = getattr(self._lib, "ncclGetLastError", None)
        if self._last_error is not None:
            self._last_error.argtypes, self._last_error.restype = [_P], ctypes.c_char_p
        code = _INT()
        self.check("ncclGetVersion", self._typed["ncclGetVersion"](ctypes.byref(code)))
        self.version = code.value

    def has(self, name: str) -> bool:
        return name in self._typed

    def typed(self, name: str):
        if name not in self._typed:
            raise NcclError(f"{name} is not in {self.path} (NCCL {version_text(self.version)})")
        return self._typed[name]

    def check(self, name: str, result: int, comm=None) -> None:
        if result == 0:
            return
        label = RESULTS[result] if 0 <= result < len(RESULTS) else f"ncclResult_t {result}"
        text = self._error_string(result)
        detail = self._last_error(comm) if self._last_error is not None else None
        raise NcclError(
            f"{name} returned {label}: {(text or b'').decode(errors='replace')}"
            + (f" ({detail.decode(errors='replace')})" if detail else "")
        )

    def unique_id(self) -> bytes:
        uid = UniqueId()
        self.check("ncclGetUniqueId", self.typed("ncclGetUniqueId")(ctypes.byref(uid)))
        return bytes(uid)

    def untyped(self, name: str):
        """A fresh function pointer without argtypes: it takes ready ctypes objects as they are."""
        self.typed(name)  # present?
        fn = self._lib[name]
        fn.restype = ctypes.c_int
        return fn


def convert(name: str, values: tuple) -> tuple:
    """`values` as the header's types for `name`, converted once, here (a wrong type or a value out
    of range fails now, with the call's name, never inside the timed loop)."""
    params = SIGNATURES[name]
    if len(values) != len(params):
        raise TypeError(f"{name} takes {len(params)} arguments, got {len(values)}")
    out: list[ctypes.c_void_p | ctypes.c_size_t | ctypes.c_int] = []
    for kind, value in zip(params, values):
        if kind is _P:
            if not isinstance(value, int) or value < 0:
                raise TypeError(f"{name}: a pointer must be a non-negative int, got {value!r}")
            out.append(_P(value))
        elif kind is _SIZE:
            if not isinstance(value, int) or not 0 <= value < 1 << 63:
                raise TypeError(f"{name}: a count must be a non-negative int, got {value!r}")
            out.append(_SIZE(value))
        else:
            if not isinstance(value, int) or not -(1 << 31) <= value < 1 << 31:
                raise TypeError(f"{name}: an int argument out of range: {value!r}")
            out.append(_INT(value))
    return tuple(out)


class Communicator:
    """One ncclComm_t of `nranks`, this process being `rank`, joined through the unique id."""

    def __init__(self, lib: Library, nranks: int, unique_id: bytes, rank: int):
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise ValueError(f"an NCCL unique id is {UNIQUE_ID_BYTES} bytes, got {len(unique_id)}")
        self.lib, self.nranks, self.rank = lib, nranks, rank
        handle = _P()
        uid = UniqueId.from_buffer_copy(unique_id)
        lib.check(
            "ncclCommInitRank",
            lib.typed("ncclCommInitRank")(ctypes.byref(handle), nranks, uid, rank),
        )
        self.handle = handle
        self._fns: dict[str, object] = {}

    def call(self, name: str, *values, stream: int = 0) -> Call:
        """A ready call: `values` are the header's parameters before (comm, stream), which are
        appended for the functions enqueued on a stream."""
        if name in COMM_STREAM:
            values = (*values, self.handle.value or 0, stream)
        fn = self._fns.get(name)
        if fn is None:
            fn = self._fns[name] = self.lib.untyped(name)
        return Call(name, fn, convert(name, values))

    def issue(self, calls) -> None:
        """Issue ready calls in order from Python (`issue_loop.python_loop`): the correctness pass
        and a capture, where a loop's host time is not what is measured."""
        issue_loop.python_loop(calls, self.fail)

    def batch(self, calls) -> issue_loop.Issuer:
        """A timed trial's calls, ready to issue: by the C loop where it is built (one C call for
        the whole batch, no Python between the NCCL calls), else by the ctypes loop."""
        return issue_loop.batch(calls, self.fail)

    def fail(self, name: str, result: int) -> NoReturn:
        """A call returned `result`: NCCL's own words for an NCCL call, the number for another."""
        if name.startswith("nccl"):
            self.lib.check(name, result, self.handle)
        raise NcclError(f"{name} returned {result}")

    def destroy(self) -> None:
        if self.handle.value:
            self.lib.check("ncclCommDestroy", self.lib.typed("ncclCommDestroy")(self.handle))
            self.handle = _P()


def cuda_event_record(maps: str = "/proc/self/maps"):
    """A maker of ready cudaEventRecord(event, stream) calls through the libcudart torch mapped
    (about 0.3 µs where torch's Event.record costs a Python call; docs/LOG.md), or None."""
    path = mapped("libcudart.so", maps)
    if path is None:
        return None
    fn = ctypes.CDLL(path)["cudaEventRecord"]
    fn.restype = ctypes.c_int

    def record(event: int, stream: int) -> Call:
        return Call("cudaEventRecord", fn, (_P(event), _P(stream)))

    return record
