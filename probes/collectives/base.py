"""The interface every collective implements, modelled on nccl-tests' `testColl`.

A collective knows these things and nothing about timing or processes:
  - its shape: for a message of `size_bytes`, the elements of each rank's send and receive
    buffers and the `size`/`count` nccl-tests prints (`*GetCollByteCount`);
  - the busbw factor that makes busbw comparable to link bandwidth (nccl-tests doc/PERFORMANCE.md);
    algbw is always size / time, with nccl-tests' size (the larger of the send and receive bytes);
  - exact inputs and the analytic output of every rank (`expected`), element by element;
  - how to launch it, in place where it has an in-place form: through torch.distributed
    (`launch`), and as the raw NCCL calls nccl-tests makes (`nccl_calls`: names and arguments,
    data only, issued by `probes.sweep_comm` through `probes.nccl_ctypes`).

Inputs are small integers: rank r holds `(i + r) % PATTERN + 1` at element i (1..7), and for
`prod` `2` where `(i + r) % 3 == 0`, else `1` (products stay powers of two). The expected output is
computed in int64 from every rank's input, so it is exact; `exactness_problem` refuses a
(collective, op, dtype, rank count) whose result would not be exact in the dtype.

This module imports torch only inside functions: the planner and the CLI use its tables.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

from ncclprobe.dtypes import ELEMENT_BYTES

PATTERN = 7
OPS = ("sum", "prod", "max", "min", "avg")


@dataclass(frozen=True)
class DType:
    name: str  # torch's name, used on the command line and in records
    exact_max: int  # the largest integer n such that 0..n are all exact in the type
    max_power: int  # the largest k such that 2**k is exact in the type (prod's results)
    tests_name: str  # what nccl-tests prints in its `type` column
    floating: bool = True

    @property
    def size(self) -> int:
        """Bytes per element (`ncclprobe.dtypes`)."""
        return ELEMENT_BYTES[self.name]


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", 2**24, 127, "float"),
        DType("bfloat16", 256, 127, "bfloat16"),
        DType("float16", 2048, 15, "half"),
        DType("float64", 2**53, 1023, "double"),
        DType("int8", 127, 6, "int8", floating=False),
        DType("int32", 2**31 - 1, 30, "int32", floating=False),
        DType("int64", 2**63 - 1, 62, "int64", floating=False),
        # 3 and 2 mantissa bits: 1..16 and 1..8 are exact; the inputs 1..7 are exact in both
        DType("float8_e4m3fn", 16, 8, "f8e4m3"),
        DType("float8_e5m2", 8, 15, "f8e5m2"),
    )
}
FP8 = ("float8_e4m3fn", "float8_e5m2")


def element_size(dtype: str) -> int:
    return DTYPES[dtype].size


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def torch_op(op: str):
    import torch.distributed as dist

    return {
        "sum": dist.ReduceOp.SUM,
        "prod": dist.ReduceOp.PRODUCT,
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
        "avg": dist.ReduceOp.AVG,
    }[op]


@dataclass(frozen=True)
class Shape:
    """One message: nccl-tests' `size` (bytes) and `count` columns and each rank's buffers."""

    size_bytes: int  # max(send, receive) bytes of one rank: nccl-tests' size column
    count: int  # nccl-tests' count column (elements of one rank's piece)
    send_elems: int
    recv_elems: int


def input_values(index, rank: int, op: str):
    """Rank `rank`'s exact input at element indices `index` (an int64 tensor), as int64."""
    if op == "prod":
        return ((index + rank) % 3 == 0).long() + 1
    return (index + rank) % PATTERN + 1


def crafted_input(count: int, rank: int, dtype, device):
    """Rank `rank`'s exact sum input of `count` elements in `dtype` (probes outside the sweep use it)."""
    import torch

    return input_values(torch.arange(count, device=device, dtype=torch.int64), rank, "sum").to(
        dtype
    )


def reduce_values(index, nranks: int, op: str):
    """The exact reduction over every rank's input at `index`, as int64 (float64 for avg)."""
    import torch

    acc = input_values(index, 0, op)
    for rank in range(1, nranks):
        value = input_values(index, rank, op)
        if op in ("sum", "avg"):
            acc = acc + value
        elif op == "prod":
            acc = acc * value
        elif op == "max":
            acc = torch.maximum(acc, value)
        else:
            acc = torch.minimum(acc, value)
    return acc.double() / nranks if op == "avg" else acc


def largest_result(nranks: int, op: str) -> int:
    """The largest value any output element can hold: the bound for exactness."""
    return {"sum": PATTERN * nranks, "prod": 2 ** math.ceil(nranks / 3), "avg": PATTERN}.get(
        op, PATTERN
    )


class Collective(ABC):
    name: str = ""  # on the command line and in records
    nccl_name: str = ""  # NCCL's function name (TUNING lines, nccl-tests' testColl): nccl.names
    reduces: bool = False  # takes a reduction op (--op)
    placements: tuple[bool, ...] = (True, False)  # in place, out of place
    tuned_by_nccl: bool = (
        True  # NCCL's tuning model picks its algorithm/protocol (not point-to-point)
    )
    root: int = -1  # nccl-tests' root column; 0 for rooted collectives
    torch_note: str = ""  # how the torch path differs from the NCCL call nccl-tests makes
    moves_bytes_only: bool = (
        False  # point-to-point copies: gloo moves float8 bytes without knowing the type
    )

    @abstractmethod
    def shape(self, size_bytes: int, dtype: str, nranks: int) -> Shape:
        """The buffers for a message of `size_bytes` (rounded down to whole elements, at least one)."""

    @abstractmethod
    def busbw_factor(self, nranks: int) -> float:
        """busbw = algbw * factor (nccl-tests doc/PERFORMANCE.md)."""

    def tuning_size(self, logged_bytes: int, nranks: int) -> int:
        """nccl-tests' size for a TUNING line's bytes: NCCL logs count x type size (enqueue.cc), and
        its count is the per-rank piece for all-gather and reduce-scatter."""
        return logged_bytes

    def bandwidths(self, shape: Shape, time_us: float | None, nranks: int):
        """(algbw_gbps, busbw_gbps); algbw = size / time with 1 GB/s = 1e9 B/s. None without a time."""
        if not time_us:
            return None, None
        algbw = shape.size_bytes / (time_us * 1e3)
        return algbw, algbw * self.busbw_factor(nranks)

    def send_input(self, shape: Shape, rank: int, dtype, device, op: str):
        import torch

        index = torch.arange(shape.send_elems, device=device, dtype=torch.int64)
        return input_values(index, rank, op).to(dtype)

    def buffers(self, shape: Shape, rank: int, nranks: int, dtype, device, in_place: bool, op: str):
        """(send, recv) holding rank `rank`'s input; in place the send buffer lies inside recv."""
        import torch

        send = self.send_input(shape, rank, dtype, device, op)
        if not in_place:
            return send, torch.zeros(shape.recv_elems, dtype=dtype, device=device)
        recv = torch.zeros(shape.recv_elems, dtype=dtype, device=device)
        view = self.in_place_send(recv, shape, rank)
        view.copy_(send)
        return view, recv

    def in_place_send(self, recv, shape: Shape, rank: int):
        """Where the send buffer lies inside the receive buffer in place (nccl-tests' offsets)."""
        return recv

    @abstractmethod
    def expected(self, shape: Shape, rank: int, nranks: int, op: str):
        """The exact int64 (float64 for avg) content of rank `rank`'s receive buffer, on the CPU;
        None where the rank receives nothing (reduce off the root)."""

    @abstractmethod
    def launch(self, send, recv, group, in_place: bool, op: str) -> None:
        """Issue the collective once through torch.distributed on `group`."""

    @abstractmethod
    def nccl_calls(
        self,
        send: int,
        recv: int,
        shape: Shape,
        dtype: str,
        op: str,
        rank: int,
        nranks: int,
        version: int,
    ) -> list[tuple[str, tuple]]:
        """The NCCL calls of one collective, as nccl-tests makes them: (function name, its
        arguments before comm and stream), pointers as ints; `version` is NCCL's version code."""

    def unsupported(self, dtype: str, op: str, backend: str, path: str) -> str | None:
        """Why this (dtype, op) cannot run here, or None."""
        if backend == "gloo" and dtype in FP8 and not self.moves_bytes_only:
            return "gloo has no float8 types"
        if self.reduces:
            if dtype in FP8:
                return (
                    "torch.distributed refuses float8 reductions ('Float8 dtypes are not currently supported "
                    "for NCCL reductions'); the raw path leaves them out too, so both paths measure alike"
                )
            if op == "avg" and not DTYPES[dtype].floating:
                return "avg is measured on floating-point dtypes only (NCCL divides integers with truncation)"
        return None

    def ranks_problem(self, nranks: int, path: str) -> str | None:
        """Why it cannot run on `nranks` ranks through `path`, or None."""
        return None

    def exactness_problem(self, dtype: str, op: str, nranks: int) -> str | None:
        """Why the result would not be exact in `dtype`, or None."""
        op = op if self.reduces else "none"
        top = largest_result(nranks, op)
        kind = DTYPES[dtype]
        if op == "prod" and top.bit_length() - 1 > kind.max_power:
            return (
                f"{self.name} prod over {nranks} ranks reaches {top}, beyond the largest power of two "
                f"{dtype} holds (2**{kind.max_power}): the correctness check could not be exact"
            )
        if op != "prod" and top > kind.exact_max:
            return (
                f"{self.name} {op} over {nranks} ranks reaches {top}, beyond what {dtype} holds exactly "
                f"({kind.exact_max}): the correctness check could not be exact"
            )
        return None

    def tolerance(self, dtype: str, op: str, nranks: int) -> float:
        """0 (exact) except avg over a rank count that is not a power of two, where NCCL multiplies by a
        rounded 1/n: then half an ulp of the largest result per rank."""
        if not (self.reduces and op == "avg") or nranks & (nranks - 1) == 0:
            return 0.0
        import torch

        return float(torch.finfo(torch_dtype(dtype)).eps) * PATTERN * nranks


def nccl_type(dtype: str) -> int:
    """ncclDataType_t of a torch dtype name."""
    from ncclprobe.probes.nccl_ctypes import DATA_TYPES

    return DATA_TYPES[dtype]


def nccl_op(op: str) -> int:
    """ncclRedOp_t of a reduction op."""
    from ncclprobe.probes.nccl_ctypes import RED_OPS

    return RED_OPS[op]


def per_rank_shape(size_bytes: int, dtype: str, nranks: int, *, send_whole: bool) -> Shape:
    """A collective whose buffer is n pieces of c elements (all-gather, reduce-scatter, all-to-all):
    c = size / (n x element), at least 1, so size is what the n pieces hold."""
    elt = element_size(dtype)
    count = max(1, size_bytes // (elt * nranks))
    whole, piece = count * nranks, count
    return Shape(
        size_bytes=whole * elt,
        count=count,
        send_elems=whole if send_whole else piece,
        recv_elems=piece if send_whole else whole,
    )


def whole_shape(size_bytes: int, dtype: str) -> Shape:
    """A collective whose send and receive buffers both hold the whole message."""
    count = max(1, size_bytes // element_size(dtype))
    return Shape(
        size_bytes=count * element_size(dtype), count=count, send_elems=count, recv_elems=count
    )


def arange(n: int):
    import torch

    return torch.arange(n, dtype=torch.int64)
