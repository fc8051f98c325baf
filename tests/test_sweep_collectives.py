"""Collective bookkeeping: exact inputs, analytic results, nccl-tests' bandwidth formulas."""

import pytest
import torch

from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.collectives.base import crafted_input, torch_dtype

AR = COLLECTIVES["all_reduce"]


@pytest.mark.parametrize("nranks", [1, 2, 3, 7, 8, 15, 36])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_all_reduce_expected_is_the_exact_sum(nranks, dtype):
    td = torch_dtype(dtype)
    count = 50
    brute = sum(crafted_input(count, r, torch.float64, "cpu") for r in range(nranks))
    expected = AR.expected(count, 0, nranks, td, "cpu")
    assert expected.dtype == td
    assert torch.equal(expected.to(torch.float64), brute)  # exact: no rounding in the chosen dtype


def test_inputs_differ_between_ranks_and_are_small_integers():
    a, b = crafted_input(14, 0, torch.float32, "cpu"), crafted_input(14, 1, torch.float32, "cpu")
    assert not torch.equal(a, b)
    assert a.min() >= 1 and a.max() <= 7 and torch.equal(a, a.round())


@pytest.mark.parametrize("nranks,factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_all_reduce_busbw_factor(nranks, factor):
    assert AR.busbw_factor(nranks) == pytest.approx(factor)


def test_bandwidths_follow_nccl_tests():
    # 1 MiB float32 in 100 us on 4 ranks: algbw = 1048576 B / 100e-6 s = 10.48576 GB/s
    algbw, busbw = AR.bandwidths(1 << 20, "float32", 4, 100.0)
    assert algbw == pytest.approx(10.48576)
    assert busbw == pytest.approx(10.48576 * 1.5)
    assert AR.bandwidths(1 << 20, "float32", 4, None) == (None, None)


def test_count_rounds_down_to_whole_elements_but_keeps_one():
    assert AR.count(1024, "float32", 2) == 256
    assert AR.count(1024, "bfloat16", 2) == 512
    assert AR.count(2, "float32", 2) == 1
