"""Records a sweep relies on: the resume trim and the cross-rank aggregation."""

import json

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.records import Status, read_results
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
    assert out.time_us == 30.0
    assert out.time_us_p10 == pytest.approx(15 + 0.2 * 15)
    assert out.time_us_p90 == pytest.approx(30 + 0.8 * 10)
    assert out.rank_spread_us == 5.0  # rank medians 20 and 15
    assert out.trials == 3


def test_percentile_matches_linear_interpolation():
    assert quantile([1.0, 2.0, 3.0, 4.0], 50, of=100) == 2.5
    assert quantile([5.0], 90, of=100) == 5.0


def test_a_nearest_rank_percentile_that_is_not_whole_picks_a_sample():
    """ceil(4 * 50.5 / 100) = 3: the third sample (a float percentile used to index the list with
    a float, a TypeError); a whole one on its boundary (50: the second) as before."""
    ordered = [1.0, 2.0, 3.0, 4.0]
    assert quantile(ordered, 50.5, of=100, method="nearest-rank") == 3.0
    assert quantile(ordered, 50, of=100, method="nearest-rank") == 2.0


# What the sweep wrote before results were typed (a real H100 raw-path record, examples/results/
# issue32_2026-12-06, plus `issued_by_why`, which came after it; an error record from a real gloo
# sweep with a rank that refused): the typed record writes the same keys in the same order.
MEASURED_KEYS = (
    "record config_id settings collective op mode in_place dtype size_bytes count root nranks "
    "status reason time_us time_us_p10 time_us_p90 rank_spread_us trials iter cpu_issue_us "
    "cost_split algbw_gbps busbw_gbps wrong checked agg path issued_by issued_by_why buffers source"
).split()
FAILED_KEYS = (
    "record config_id settings collective op mode in_place dtype size_bytes count root nranks "
    "status reason time_us cost_split wrong checked agg path buffers source"
).split()


def _message(rank, **fields):
    """One rank's result message for one measurement, as a raw-path NCCL worker sends it."""
    base = {
        "collective": "all_reduce",
        "op": "sum",
        "mode": "eager",
        "in_place": False,
        "dtype": "float32",
        "size_bytes": 4096,
        "count": 1024,
        "trial_us": [10.0 + rank, 12.5, 11.25],
        "iter_us": [9.5, 10.0 + rank, 14.0, 10.5],
        "issue_us": [0.5, 0.75 + rank],
        "wrong": 0,
        "split": {"nccl": [9.0, 9.5], "nccl+events": [9.75, 10.0], "torch+events": [30.0, 31.0]},
        "split_refused": {"torch": "RuntimeError: refused"},
        "issued_by": "c-loop",
        "issued_by_why": None,
    }
    return {**base, **fields}


def test_a_record_the_sweep_writes_reads_back_as_the_same_record_and_the_same_bytes(tmp_path):
    from ncclprobe.records import ResultRecord
    from ncclprobe.safe_output import dumps_json
    from ncclprobe.sweep.plan import Config, SweepSpec
    from ncclprobe.sweep.result import result_record

    spec = SweepSpec(grid={}, sizes=(4096,), backend="nccl", path="nccl", iter_events=True)
    config = Config({"NCCL_PROTO": "LL"})
    measured = result_record(spec, config, {0: _message(0), 1: _message(1)}, "ok")
    failed = result_record(spec, config, {0: _message(0), 1: {"error": "boom"}}, "ok")
    assert list(measured.to_record()) == MEASURED_KEYS and list(failed.to_record()) == FAILED_KEYS
    assert measured.cost_split.refused == {"torch": "rank 0: RuntimeError: refused"}
    assert measured.iter.samples == 4 and measured.trials == 3 and failed.reason == "rank 1: boom"
    path = tmp_path / "r.jsonl"
    with ResultWriter(path, {"kind": "sweep"}) as writer:
        writer.write({"record": "config", "config_id": config.config_id, "results_expected": 2})
        for record in (measured, failed):
            writer.write(record.to_record())
    back = read_results(path).results
    assert back == [measured, failed]
    lines = path.read_text().splitlines()[2:]
    assert lines == [dumps_json(r.to_record(), sort_keys=False, default=str) for r in back]
    assert ResultRecord.from_record(json.loads(lines[0])) == measured


def test_fields_a_newer_writer_adds_are_kept_and_written_back():
    from ncclprobe.records import ResultRecord

    record = {**_result("default", 8), "status": "ok", "time_us": 1.0, "novel": {"x": 1}}
    typed = ResultRecord.from_record(record)
    assert typed.extra == {"novel": {"x": 1}} and typed.to_record()["novel"] == {"x": 1}


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("iter", {"p50_us": "fast"}, 'in iter: field "p50_us" must be a finite number'),
        ("cost_split", {"nccl_us": True}, 'in cost_split: field "nccl_us" must be a finite number'),
        ("cost_split", {"refused": {"torch": 1}}, "an object of string values"),
        ("iter", [1, 2], 'field "iter" must be a JSON object'),
        ("checked", "yes", 'field "checked" must be true or false'),
        ("root", 1.5, 'field "root" must be a whole number'),
    ],
)
def test_the_parts_of_a_result_the_typed_record_holds_are_validated(
    tmp_path, field, value, message
):
    path = tmp_path / "r.jsonl"
    _write(path, [])
    with open(path, "a") as fh:
        fh.write(json.dumps({**_result("default", 8), field: value}) + "\n")
    with pytest.raises(UsageProblem, match="line 2") as raised:
        read_results(path)
    assert message in str(raised.value)


def test_a_result_reads_as_its_types_whatever_an_older_writer_left_out():
    from ncclprobe.records import ResultRecord

    base = {**_result("default", 8), "status": "ok"}
    assert ResultRecord.from_record(base).status is Status.OK
    assert ResultRecord.from_record({**base, "mode": "graph"}).mode == "graph"
    for older in ({k: v for k, v in base.items() if k != "mode"}, {**base, "mode": None}):
        assert ResultRecord.from_record(older).mode == "eager"
    assert ResultRecord.from_record({**base, "settings": None}).settings == {}


def test_a_real_raw_path_record_reads_its_cost_split_and_issue_loop():
    """An H100 record of the raw NCCL path (examples/results/issue32_2026-12-06): every figure of
    its cost split as written."""
    from pathlib import Path

    path = Path(__file__).parent.parent / (
        "examples/results/issue32_2026-12-06/h100_cost_split_settle/settle_1.jsonl"
    )
    first = read_results(path).results[0]
    split = first.cost_split
    assert (split.nccl_us, split.path_us, split.events_us, split.torch_dispatch_us) == (
        0.3978,
        0.0,
        1.5078,
        32.2963,
    )
    assert split.variants["torch"]["time_us"] == 32.6941 and split.refused == {}
    assert first.iter.p99_us == 0.6899 and first.issued_by.startswith("a compiled loop")


def test_records_of_a_kind_this_version_does_not_know_are_left_alone(tmp_path):
    path = tmp_path / "r.jsonl"
    _write(path, [("default", 1, 1)])
    with open(path, "a") as fh:
        fh.write(json.dumps({"record": "future", "anything": [1]}) + "\n")
    back = read_results(path)
    assert len(back.results) == 1 and len(back.configs) == 1


def test_a_header_env_that_is_not_text_is_refused_and_a_result_may_hold_any_object(tmp_path):
    """Only the header's `env` is a string map (`validate_record`); other records keep theirs."""
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps({"record": "header", "schema_version": 1, "kind": "sweep", "env": {"A": 1}})
        + "\n"
    )
    with pytest.raises(UsageProblem, match='field "env" must be an object of string values'):
        read_results(path)
    _write(path.with_name("ok.jsonl"), [])
    with open(path.with_name("ok.jsonl"), "a") as fh:
        fh.write(json.dumps({**_result("default", 8), "env": {"A": 1}}) + "\n")
    assert read_results(path.with_name("ok.jsonl")).results[0].extra == {"env": {"A": 1}}
