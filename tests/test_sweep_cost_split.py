"""The eager cost split (docs/METRICS.md "cost_split"): from every rank's four timings to the record's
figures, its note and its CSV columns. That a real gloo sweep, where no NCCL path exists, records none
is checked on tests/test_sweep_e2e.py's sweep."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ncclprobe.records import CostSplit, ResultRecord, Status
from ncclprobe.sweep.cost_split import cost_split, issue_notes, notes, variant_name
from ncclprobe.sweep.table import SPLIT_COLUMNS, Ranked, csv_row


def _rank(nccl, nccl_ev, torch, torch_ev, refused=None):
    split = {"nccl": nccl, "nccl+events": nccl_ev, "torch": torch, "torch+events": torch_ev}
    return {
        "split": {k: v for k, v in split.items() if v is not None},
        "split_refused": refused or {},
    }


def test_the_slowest_rank_per_trial_then_the_median_decides_each_variant():
    by_rank = {
        0: _rank([7.0, 9.0, 8.0], [8.0, 8.5, 9.0], [20.0, 21.0, 22.0], [40.0, 41.0, 42.0]),
        1: _rank([8.0, 7.0, 7.5], [9.5, 8.0, 8.0], [19.0, 23.0, 21.0], [39.0, 45.0, 41.0]),
    }
    split = cost_split(by_rank, "nccl", time_us=8.0)
    # per trial max: nccl 8, 9, 8 -> 8; nccl+events 9.5, 8.5, 9 -> 9; torch 20, 23, 22 -> 22
    assert split.variants["nccl"]["time_us"] == 8.0
    assert split.variants["nccl+events"]["time_us"] == 9.0
    assert split.variants["torch"]["time_us"] == 22.0
    assert split.variants["torch+events"]["time_us"] == 42.0
    assert split.nccl_us == 8.0
    assert split.path_us == 0.0
    assert split.events_us == 1.0  # the row's own path: nccl
    assert split.torch_dispatch_us == 14.0
    assert split.variants["nccl"]["time_us_p10"] == 8.0
    assert split.variants["nccl"]["time_us_p90"] == pytest.approx(8.8)


def test_the_events_share_is_the_rows_own_paths_and_the_path_share_its_excess_over_nccl():
    by_rank = {0: _rank([7.0], [8.0], [20.0], [44.0])}
    split = cost_split(by_rank, "torch", time_us=44.0)
    assert split.events_us == 24.0 and split.path_us == 37.0
    assert split.torch_dispatch_us == 13.0


def test_a_negative_difference_is_kept_as_measured():
    split = cost_split({0: _rank([8.0], [7.5], [8.0], [8.0])}, "nccl", time_us=8.0)
    assert split.events_us == -0.5


def test_a_variant_a_rank_could_not_time_leaves_its_figures_empty_with_the_reason():
    refusal = {"torch": "RuntimeError: torch.distributed refuses a send to the sending rank"}
    by_rank = {0: _rank([7.0], [8.0], None, None, refusal)}
    split = cost_split(by_rank, "nccl", time_us=7.0)
    assert split.nccl_us == 7.0 and split.events_us == 1.0
    assert split.torch_dispatch_us is None and "torch" not in split.variants
    assert split.refused == {"torch": "rank 0: " + refusal["torch"]}


def test_a_variant_missing_on_one_rank_is_not_aggregated_from_the_other():
    by_rank = {0: _rank([7.0], [8.0], [20.0], [40.0]), 1: _rank([7.0], [8.0], None, [40.0])}
    split = cost_split(by_rank, "nccl", time_us=7.0)
    assert "torch" not in split.variants and split.torch_dispatch_us is None


def test_no_split_where_a_rank_measured_none():
    assert cost_split({0: _rank([7.0], [8.0], [20.0], [40.0]), 1: {}}, "nccl", 7.0) is None
    assert cost_split({}, "nccl", 7.0) is None


def test_variant_names():
    assert variant_name("nccl", True) == "nccl+events" and variant_name("torch", False) == "torch"


def _record(size, nccl_us, path_us, dispatch, events, mode="eager"):
    return ResultRecord(
        config_id="default",
        collective="all_reduce",
        path="nccl",
        in_place=False,
        mode=mode,
        size_bytes=size,
        cost_split=CostSplit(
            nccl_us=nccl_us, path_us=path_us, torch_dispatch_us=dispatch, events_us=events
        ),
    )


def _eager(**fields):
    return ResultRecord(config_id="default", size_bytes=8, **fields)


def test_the_note_gives_the_range_over_sizes_of_each_part():
    results = [
        _record(8, 7.31, 0.4, 12.0, 0.3),
        _record(1 << 20, 8.02, 0.1, 10.5, 0.35),
        _record(8, 1.0, 0.0, 0.0, 0.0, mode="graph"),
    ]
    (line,) = notes(results)
    assert line.startswith("eager cost split, all_reduce out of place, path nccl, 2 size(s): ")
    assert "NCCL's own 7.31 to 8.02 µs per call (raw path, no events)" in line
    assert "this path adds +0.10 to +0.40" in line
    assert "torch dispatch +10.50 to +12.00" in line
    assert "per-iteration events +0.30 to +0.35" in line


def test_a_part_never_measured_says_so():
    (line,) = notes([_record(8, 7.0, 0.0, None, 0.2)])
    assert "torch dispatch not measured" in line and "NCCL's own 7.00 µs" in line


def test_rows_without_nccl_figures_make_no_note():
    assert notes([_record(8, None, None, None, None)]) == []
    assert notes([_eager(collective="all_reduce", mode="eager", in_place=True)]) == []


def test_the_issue_note_counts_eager_raw_rows_by_what_issued_them_and_why():
    why = "NCCLPROBE_ISSUE_LOOP=ctypes"
    results = [
        _eager(mode="eager", issued_by="c-loop", issued_by_why=None),
        _eager(mode="eager", issued_by="c-loop"),
        _eager(mode="eager", issued_by="ctypes", issued_by_why=why),
        _eager(mode="eager", issued_by="ctypes", issued_by_why="a call the C loop cannot make"),
        _eager(mode="graph", issued_by="ctypes", issued_by_why=why),  # a replay issues nothing
        _eager(mode="eager", issued_by=None),  # the torch path
        _eager(mode="eager"),
        _eager(mode="eager", issued_by="a compiled loop (x86-64)"),  # an older file's sentence
    ]
    ctypes_words = (
        "ctypes, a Python loop that adds its own host time to each call (about 0.6 µs on the GPU "
        "machines, docs/METRICS.md)"
    )
    assert issue_notes(results) == [
        "raw path, 2 eager row(s): calls issued by the C loop (c-loop), back to back from C as "
        "nccl-tests issues them",
        f"raw path, 1 eager row(s): calls issued by {ctypes_words} ({why})",
        f"raw path, 1 eager row(s): calls issued by {ctypes_words} (a call the C loop cannot make)",
        "raw path, 1 eager row(s): calls issued by a compiled loop (x86-64)",
    ]
    assert issue_notes([_eager(mode="eager", issued_by=None)]) == []


def test_csv_rows_carry_the_four_figures():
    row = csv_row(Ranked(replace(_record(8, 7.3, 0.4, 12.0, 0.3), status=Status.OK)))
    assert [row[k] for k in SPLIT_COLUMNS] == [7.3, 0.4, 12.0, 0.3]
    assert all(csv_row(Ranked(_eager(status=Status.OK)))[k] is None for k in SPLIT_COLUMNS)


# A real gloo sweep records no split (gloo has no NCCL path, so nothing is measured though the split
# is on by default): tests/test_sweep_e2e.py's test_a_gloo_sweep_records_no_cost_split, on the sweep
# that module runs anyway.
