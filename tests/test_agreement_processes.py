"""examples/agreement_processes.py's verdict: medians over processes, the 15 % bound at its edge,
and rows one tool did not measure (nccl-tests' 8 B all_gather moves no bytes) left out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import agreement_processes as ap  # noqa: E402


def _row(theirs, ours, slow=()):
    return {"nccl-tests": list(theirs), "ncclprobe": list(ours), "ncclprobe-ctypes": list(slow)}


@pytest.mark.parametrize(
    ("ours", "within"),
    [([11.5], True), ([11.6], False), ([8.5], True), ([8.4], False)],
)
def test_the_bound_is_fifteen_percent_of_the_median_either_way(ours, within):
    (row,), _ = ap.table({("all_reduce", "out", 8): _row([10.0], ours)})
    assert row["within"] is within


def test_medians_over_processes_decide_and_the_fastest_are_shown():
    rows = {("all_reduce", "out", 8): _row([4.0, 5.0, 9.0], [4.4, 5.2, 5.3], [6.0, 6.2])}
    (row,), text = ap.table(rows)
    assert row["delta_median_pct"] == 4.0  # 5.2 against 5.0, not the means
    assert row["delta_fastest_pct"] == 10.0  # 4.4 against 4.0
    assert row["ctypes_delta_median_pct"] == 22.0  # 6.1 against 5.0
    assert (
        "| all_reduce | out | 8 | 5.00 [4.00-9.00] | 5.20 [4.40-5.30] | +4.0 % | +10.0 % | yes |"
        in text
    )
    assert text.rstrip().endswith("1 of 1 rows within 15 % (medians over processes).")


def test_a_row_one_tool_did_not_measure_is_not_judged():
    rows = {
        ("all_gather", "out", 8): _row([], [4.0]),
        ("all_gather", "out", 64): _row([4.0], []),
        ("all_gather", "in", 8): _row([0.0], [0.2]),
    }
    done, text = ap.table(rows)
    assert done == [] and text.rstrip().endswith(
        "0 of 0 rows within 15 % (medians over processes)."
    )
