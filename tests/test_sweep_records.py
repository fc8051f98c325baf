"""Records a sweep relies on: the resume trim and the cross-rank aggregation."""

import json

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.records import read_results
from ncclprobe.records_writer import ResultWriter, trim_incomplete_tail
from ncclprobe.stats import aggregate_trials, quantile


def _result(config_id, size):
    return {
        "record": "result",
        "config_id": config_id,
        "collective": "all_reduce",
        "mode": "eager",
        "in_place": True,
        "dtype": "float32",
        "size_bytes": size,
    }


def _write(path, groups, torn=""):
    with ResultWriter(path, {"kind": "sweep"}) as writer:
        for config_id, expected, written in groups:
            writer.write({"record": "config", "config_id": config_id, "results_expected": expected})
            for size in range(written):
                writer.write(_result(config_id, size))
    if torn:
        with open(path, "a") as fh:
            fh.write(torn)


def test_trim_keeps_complete_groups_and_drops_an_unfinished_tail(tmp_path):
    path = tmp_path / "r.jsonl"
    _write(path, [("a", 2, 2), ("hung", 0, 0), ("b", 3, 1)], torn='{"record": "res')
    trimmed = trim_incomplete_tail(path)
    assert [c["config_id"] for c in trimmed.configs] == ["a", "hung"]
    assert len(trimmed.results) == 2
    assert path.read_text().endswith("\n")
    assert trim_incomplete_tail(path).configs == trimmed.configs  # idempotent


def test_trim_of_a_complete_file_changes_nothing(tmp_path):
    path = tmp_path / "r.jsonl"
    _write(path, [("a", 1, 1)])
    before = path.read_bytes()
    trim_incomplete_tail(path)
    assert path.read_bytes() == before


def test_trim_refuses_another_schema(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"record": "header", "schema_version": 99}) + "\n")
    with pytest.raises(UsageProblem, match="schema version 99"):
        trim_incomplete_tail(path)


def test_writer_never_overwrites(tmp_path):
    path = tmp_path / "r.jsonl"
    _write(path, [])
    with pytest.raises(UsageProblem, match="exists"):
        ResultWriter(path, {"kind": "sweep"})
    assert read_results(path).header["kind"] == "sweep"


def test_the_slowest_rank_decides_each_trial():
    out = aggregate_trials({0: [10.0, 30.0, 20.0], 1: [15.0, 12.0, 40.0]})
    # per-trial max: 15, 30, 40 -> median 30
    assert out["time_us"] == 30.0
    assert out["time_us_p10"] == pytest.approx(15 + 0.2 * 15)
    assert out["time_us_p90"] == pytest.approx(30 + 0.8 * 10)
    assert out["rank_spread_us"] == 5.0  # rank medians 20 and 15
    assert out["trials"] == 3


def test_percentile_matches_linear_interpolation():
    assert quantile([1.0, 2.0, 3.0, 4.0], 50, of=100) == 2.5
    assert quantile([5.0], 90, of=100) == 5.0
