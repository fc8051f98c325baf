"""Collective bookkeeping against independent references: every rank's buffers pushed through a
plain-torch simulation of the collective must give exactly what `expected` says, in every dtype the
sweep allows; shapes and busbw factors follow nccl-tests (src/*.cu, doc/PERFORMANCE.md)."""

import pytest
import torch

from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import DTYPES, torch_dtype

REDUCE = {
    "sum": lambda xs: sum(xs),
    "prod": lambda xs: torch.stack(xs).prod(0),
    "max": lambda xs: torch.stack(xs).max(0).values,
    "min": lambda xs: torch.stack(xs).min(0).values,
    "avg": lambda xs: sum(xs) / len(xs),
}


def simulate(name, sends, op, n, c):
    """What each rank receives, written from the collective's definition, in float64."""
    xs = [s.double() for s in sends]
    if name == "all_reduce":
        return [REDUCE[op](xs)] * n
    if name == "all_gather":
        return [torch.cat(xs)] * n
    if name == "reduce_scatter":
        whole = REDUCE[op](xs)
        return [whole[r * c : (r + 1) * c] for r in range(n)]
    if name == "broadcast":
        return [xs[0]] * n
    if name == "reduce":
        return [REDUCE[op](xs)] + [None] * (n - 1)
    if name == "alltoall":
        return [torch.cat([xs[j][r * c : (r + 1) * c] for j in range(n)]) for r in range(n)]
    return [xs[(r - 1) % n] for r in range(n)]  # sendrecv: from the previous rank


CASES = [
    (name, op)
    for name, coll in COLLECTIVES.items()
    for op in (("sum", "prod", "max", "min", "avg") if coll.reduces else ("none",))
]


@pytest.mark.parametrize("nranks", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("name,op", CASES)
def test_expected_equals_a_simulation_of_the_definition(name, op, nranks):
    coll = COLLECTIVES[name]
    for dtype in ("float32", "bfloat16", "int32"):
        if coll.unsupported(dtype, op, "nccl", "torch") or coll.exactness_problem(
            dtype, op, nranks
        ):
            continue
        shape = coll.shape(96 * nranks, dtype, nranks)
        td = torch_dtype(dtype)
        sends = [coll.send_input(shape, r, td, "cpu", op) for r in range(nranks)]
        for r, want in enumerate(simulate(name, sends, op, nranks, shape.count)):
            got = coll.expected(shape, r, nranks, op)
            if want is None:
                assert got is None
                continue
            assert got.numel() == shape.recv_elems
            assert torch.equal(got.double(), want), (name, op, dtype, r)


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_inputs_are_small_integers_that_differ_between_ranks_and_survive_every_dtype(name):
    coll = COLLECTIVES[name]
    shape = coll.shape(4096, "float32", 4)
    a, b = (coll.send_input(shape, r, torch.float64, "cpu", "sum") for r in (0, 1))
    assert not torch.equal(a, b) and a.min() >= 1 and a.max() <= 7 and torch.equal(a, a.round())
    for dtype in DTYPES:
        assert torch.equal(a.to(torch_dtype(dtype)).double(), a), dtype


@pytest.mark.parametrize(
    "name,in_place_offset", [("all_gather", True), ("reduce_scatter", True), ("all_reduce", False)]
)
def test_in_place_buffers_sit_at_nccl_tests_offsets(name, in_place_offset):
    coll, n, rank = COLLECTIVES[name], 4, 2
    shape = coll.shape(1024, "float32", n)
    send, recv = coll.buffers(shape, rank, n, torch.float32, "cpu", True, "sum")
    assert send.untyped_storage().data_ptr() == recv.untyped_storage().data_ptr()
    offset = (
        (send.data_ptr() - recv.data_ptr())
        if name == "all_gather"
        else (recv.data_ptr() - send.data_ptr())
    )
    assert offset == (rank * shape.count * 4 if in_place_offset else 0)


# nccl-tests' size/count columns (src/*.cu *GetCollByteCount): 1 MiB float32 on 4 ranks
SHAPES = {
    "all_reduce": (1 << 20, 262144),
    "all_gather": (1 << 20, 65536),
    "reduce_scatter": (1 << 20, 65536),
    "broadcast": (1 << 20, 262144),
    "reduce": (1 << 20, 262144),
    "alltoall": (1 << 20, 65536),
    "sendrecv": (1 << 20, 262144),
}
FACTORS = {
    "all_reduce": 1.5,
    "all_gather": 0.75,
    "reduce_scatter": 0.75,
    "broadcast": 1.0,
    "reduce": 1.0,
    "alltoall": 0.75,
    "sendrecv": 1.0,
}


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_shape_and_busbw_follow_nccl_tests(name):
    coll = COLLECTIVES[name]
    shape = coll.shape(1 << 20, "float32", 4)
    assert (shape.size_bytes, shape.count) == SHAPES[name]
    assert max(shape.send_elems, shape.recv_elems) * 4 == shape.size_bytes
    algbw, busbw = coll.bandwidths(shape, 100.0, 4)  # 1 MiB in 100 us: 10.48576 GB/s
    assert algbw == pytest.approx(10.48576) and busbw == pytest.approx(10.48576 * FACTORS[name])
    assert coll.bandwidths(shape, None, 4) == (None, None)


@pytest.mark.parametrize("nranks,factors", [(1, (0.0, 0.0)), (2, (1.0, 0.5)), (8, (1.75, 0.875))])
def test_rank_dependent_factors(nranks, factors):
    assert COLLECTIVES["all_reduce"].busbw_factor(nranks) == pytest.approx(factors[0])
    for name in ("all_gather", "reduce_scatter", "alltoall"):
        assert COLLECTIVES[name].busbw_factor(nranks) == pytest.approx(factors[1])


def test_exactness_bounds_refuse_what_a_dtype_cannot_hold():
    ar = COLLECTIVES["all_reduce"]
    assert ar.exactness_problem("bfloat16", "sum", 36) is None  # 252 <= 256
    assert "256" in ar.exactness_problem("bfloat16", "sum", 37)
    assert ar.exactness_problem("bfloat16", "prod", 60) is None  # 2**20: a power of two bf16 holds
    assert "2**6" in ar.exactness_problem("int8", "prod", 21)  # 2**7 = 128 > int8
    assert (
        COLLECTIVES["all_gather"].exactness_problem("float8_e5m2", "none", 512) is None
    )  # copies only
    assert "float8" in ar.unsupported("float8_e4m3fn", "sum", "nccl", "torch")
    assert COLLECTIVES["all_gather"].unsupported("float8_e4m3fn", "none", "nccl", "torch") is None
    assert "gloo" in COLLECTIVES["all_gather"].unsupported("float8_e4m3fn", "none", "gloo", "torch")
    assert COLLECTIVES["sendrecv"].unsupported("float8_e4m3fn", "none", "gloo", "torch") is None
    assert "floating" in ar.unsupported("int32", "avg", "gloo", "torch")


def test_small_sizes_round_to_at_least_one_element_per_rank():
    assert COLLECTIVES["all_gather"].shape(8, "float32", 4).size_bytes == 16
    assert COLLECTIVES["all_reduce"].shape(6, "bfloat16", 2).count == 3
