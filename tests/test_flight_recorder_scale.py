"""A folder of many ranks' dumps: rank files that cannot be read are named and the diagnosis goes
on without them (issue 40 §6), the folder's other files are skipped (issue 36 §5), and a 128-rank
job GENERATED from the real recording (tests/flight_recorder_job.py) reads into output that scales:
the culprit within the first 20 lines, no rank set listed one by one (issue 37). Time and memory
are the benchmark's (examples/bench_flight_recorder_scale.py), not asserted here."""

import json
import pickle
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.hang import flight_recorder as fr
from ncclprobe.rank_ranges import parse_ranges, ranges_text, rank_word, spans
from tests.flight_recorder_job import write_job

RECORDED = Path(__file__).parent / "fixtures" / "flight_recorder"
HEALTHY = RECORDED / "nccl" / "healthy"


def _run(*args):
    result = CliRunner().invoke(cli, ["diagnose", *args], prog_name="ncclprobe")
    return result, result.stdout.splitlines()


# ---- rank ranges -----------------------------------------------------------------------------


def test_rank_sets_print_as_ranges_and_read_back():
    assert ranges_text([0, 1, 2, 3, 5, 7, 8, 9]) == "0-3, 5, 7-9"
    assert ranges_text([4, 5]) == "4, 5" and ranges_text([4, 5, 6]) == "4-6"
    assert ranges_text([]) == "" and spans([3, 1, 2, 2]) == [(1, 3)]
    assert rank_word([7]) == "rank 7" and rank_word([1, 2]) == "ranks 1, 2"
    assert rank_word(range(9)) == "ranks 0-8 (9 ranks)" and rank_word(range(8)) == "ranks 0-7"
    every_other = list(range(0, 40, 2))
    assert ranges_text(every_other, limit=3) == "0, 2, 4, ... and 17 more"
    assert parse_ranges(ranges_text([0, 1, 2, 5, 9, 10])) == [0, 1, 2, 5, 9, 10]
    with pytest.raises(ValueError):
        parse_ranges("5-3")


# ---- a folder: unreadable rank files named, other files skipped -------------------------------

UNREADABLE = {
    "empty": (b"", "is empty"),
    "NUL bytes": (b"\x00" * 100, "neither a pickle nor JSON"),
    "a JSON array": (b"[1, 2]", "got a list"),
    "UTF-16 JSON of something else": ('{"kind": 1}'.encode("utf-16"), "not a Flight Recorder dump"),
    "a cut pickle": (None, "not a readable pickle"),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The healthy recording's two dumps as ranks 0 and 1, one unreadable rank file per kind as
    ranks 2.., a protocol-0 pickle and a UTF-16 JSON dump that do read, and the job's other files."""
    path = tmp_path_factory.mktemp("dumps")
    for r in (0, 1):
        shutil.copy(HEALTHY / "dumps" / f"nccl_trace_rank_{r}", path)
    good = (HEALTHY / "dumps" / "nccl_trace_rank_0").read_bytes()
    for rank, (data, _) in enumerate(UNREADABLE.values(), start=2):
        (path / f"nccl_trace_rank_{rank}").write_bytes(
            good[: len(good) // 2] if data is None else data
        )
    doc = fr.read_dump(HEALTHY / "dumps" / "nccl_trace_rank_0")
    assert doc.entries
    raw = json.loads((HEALTHY / "json" / "nccl_trace_rank_0").read_text())
    (path / "nccl_trace_rank_7").write_bytes(pickle.dumps(raw, protocol=0))
    (path / "nccl_trace_rank_8").write_bytes(json.dumps(raw).encode("utf-16"))
    for name in ("rank0.stderr", "torchrun.log", "scenario.json", "nccl-rank0.log"):
        shutil.copy(HEALTHY / name, path / name)
    return path


def test_a_folder_names_every_unreadable_rank_file_with_why_and_reads_the_rest(folder):
    dumps = fr.read_flight_recorder([folder])
    assert [d.rank for d in dumps] == [0, 1, 7, 8]
    assert [d.format for d in dumps] == ["pickle", "pickle", "pickle", "json"]
    assert sorted(dumps.unreadable) == [2, 3, 4, 5, 6]
    for rank, (name, (_, why)) in enumerate(UNREADABLE.items(), start=2):
        path, said = dumps.unreadable[rank]
        assert path == str(folder / f"nccl_trace_rank_{rank}") and why in said, name
    assert dumps.skipped == 4  # the logs, NCCL's log and the scenario: skipped, counted


def test_the_diagnosis_says_it_concludes_without_the_unreadable_ranks(folder):
    result, lines = _run("--flight-recorder", str(folder))
    assert result.exit_code == 1, result.output  # a finding: not "every rank completed"
    text = " ".join(result.stdout.split())  # wrapped lines joined
    assert "the dumps of ranks 2-6 are there but could not be read: the diagnosis concludes" in text
    assert "rank 2: is empty" in text
    assert "every rank whose dump was read completed every collective" in text
    assert "every rank completed" not in text
    doc = json.loads(
        CliRunner()
        .invoke(cli, ["diagnose", "--flight-recorder", str(folder), "--format", "json"])
        .stdout
    )
    (f,) = [f for f in doc["findings"] if f["rule"] == "hang-dumps-unreadable"]
    assert set(f["evidence"]["unreadable"]) == {"2", "3", "4", "5", "6"}


def test_the_healthy_twin_folder_reads_without_a_word_of_unreadable(tmp_path):
    for r in (0, 1):
        shutil.copy(HEALTHY / "dumps" / f"nccl_trace_rank_{r}", tmp_path)
    shutil.copy(HEALTHY / "torchrun.log", tmp_path)
    dumps = fr.read_flight_recorder([tmp_path])
    assert (dumps.unreadable, dumps.skipped) == ({}, 1)
    result, lines = _run("--flight-recorder", str(tmp_path))
    assert result.exit_code == 0 and "unreadable" not in result.output


def test_a_file_named_directly_is_still_refused_in_one_line(folder):
    result = CliRunner().invoke(
        cli, ["diagnose", "--flight-recorder", str(folder / "nccl_trace_rank_2")]
    )
    assert result.exit_code == 2 and "is empty" in result.stderr


def test_a_folder_of_only_unreadable_rank_files_is_refused(tmp_path):
    for r in (0, 1):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(b"")
    with pytest.raises(UsageProblem, match="no readable Flight Recorder dump.*is empty.*1 more"):
        fr.read_flight_recorder([tmp_path])


def test_tensor_dimensions_are_checked_in_a_folder_too(tmp_path):
    """A negative dimension, a float one or one past MAX_SIZE (2**48, the sizes' bound by
    meaning) is refused, and in a folder named with the field."""
    raw = json.loads((HEALTHY / "json" / "nccl_trace_rank_0").read_text())
    shutil.copy(HEALTHY / "dumps" / "nccl_trace_rank_1", tmp_path)
    for bad in ([[-1]], [[1.5]], [[True]], [[0, 2**48 + 1]]):
        raw["entries"][0]["input_sizes"] = bad
        (tmp_path / "nccl_trace_rank_0").write_text(json.dumps(raw))
        dumps = fr.read_flight_recorder([tmp_path])
        assert 'field "input_sizes" must be a list of tensor shapes' in dumps.unreadable[0][1]
    raw["entries"][0]["input_sizes"] = [[0, 2**48]]  # the healthy twin: dims 0..2**48 read
    (tmp_path / "nccl_trace_rank_0").write_text(json.dumps(raw))
    assert fr.read_flight_recorder([tmp_path])[0].entries[0].input_sizes == ((0, 2**48),)


# ---- 128 ranks generated from the real recording ---------------------------------------------


@pytest.fixture(scope="module")
def job128(tmp_path_factory):
    path = tmp_path_factory.mktemp("job128")
    return write_job(path, ranks=128, calls=40, culprit=85, tp=8, missing=(3, 4, 5))


def test_128_ranks_name_the_culprit_within_20_lines_and_no_rank_one_by_one(job128):
    result, lines = _run("--flight-recorder", str(job128))
    assert result.exit_code == 1, result.output
    head = " ".join(" ".join(lines[:20]).split())
    assert "rank 85 never entered collective 41 of default_pg" in head, result.output
    assert "no dump of ranks 3-5" in head
    assert "# 16 TP groups (group 1 ... group 16, 128 ranks: 0-127): every group finished" in head
    for line in lines:  # a run of five or more numbers is a rank set listed one by one
        assert not re.search(r"\b\d+, \d+, \d+, \d+, \d+\b", line), line
    assert "ranks 0-2, 6-84, 86-127" in head  # the waiting ranks, as ranges


def test_128_ranks_json_has_every_ranks_detail(job128):
    result = CliRunner().invoke(
        cli, ["diagnose", "--flight-recorder", str(job128), "--format", "json"]
    )
    doc = json.loads(result.stdout)
    (default,) = [g for g in doc["process_groups"] if g["label"] == "default_pg"]
    assert len(default["ranks"]) == 125 and default["ranks"]["85"] == {
        "enqueued": 40,
        "completed": 40,
    }
    assert default["ranks"]["0"] == {"enqueued": 41, "completed": 40}
    top = doc["findings"][0]
    assert top["rule"] == "hang-missing-rank" and top["evidence"]["missing_ranks"] == [85]
    assert len(top["evidence"]["waiting_ranks"]) == 124


# ---- the log alone, 256 ranks (torchrun's stderr generated from the real recording's) ----------


def test_a_256_rank_log_names_the_culprit_within_20_lines_as_ranges(tmp_path):
    from tests.job_log_scale import write_log

    log = write_log(tmp_path / "job.log", ranks=256, culprit=85)
    result, lines = _run("--log", str(log))
    assert result.exit_code == 1, result.output
    head = " ".join(" ".join(lines[:20]).split())
    assert "rank 85 never entered ALLREDUCE #4 of default_pg" in head
    assert "ranks 0-84, 86-255 (255 ranks) timed out in" in head
    assert "ran_ms={0-84, 86-255=10099}" in head  # per-rank evidence grouped by value
    for line in lines:
        assert not re.search(r"\b\d+, \d+, \d+, \d+, \d+\b", line), line


# ---- the call codes (hang_codes), pinned on the layouts a dump can have --------------------------


def _table(seqs_and_sizes):
    from ncclprobe.evidence.hang.fr_entries import entry
    from ncclprobe.evidence.hang.fr_table import EntryTable
    from ncclprobe.evidence.hang.safe_pickle import Budget
    from ncclprobe.validate import Where
    from tests.flight_recorder_dumps import entry as raw

    table = EntryTable()
    for seq, numel in seqs_and_sizes:
        e = raw("2.10", 0, seq, "all_reduce", numel, "completed")
        table.add(entry(e, Where("x"), 2, Budget("x", 10**6)))
    return table


@pytest.mark.parametrize(
    "layout, codes",
    [
        (
            [(1, 8), (2, 8), (3, 8), (4, 8), (5, 8)],
            [0, 0, 0, 0, 0, -1],
        ),  # contiguous: the fast path
        ([(1, 8), (2, 8), (3, 8), (4, 8), (7, 8)], [0, 0, 0, 0, -1, -1]),  # a gap: 5 and 6 absent
        ([(1, 8), (2, 8), (2, 4), (3, 8)], [0, 2, 0, -1, -1, -1]),  # a coalesced pair at 2
        ([(2, 8), (3, 4)], [-1, 0, 1, -1, -1, -1]),  # starts late; another call at 3
        ([(3, 8), (1, 8), (2, 4)], [0, 1, 0, -1, -1, -1]),  # recorded out of order
    ],
)
def test_a_members_calls_become_one_code_per_sequence_number(layout, codes):
    """Codes over seqs 1-6: equal calls, equal codes; ABSENT (-1) where the member holds none."""
    from ncclprobe.diagnose.hang.hang_codes import CallCodes, RankCalls

    code_of = CallCodes()
    code_of.local(_table([(1, 8), (1, 4)]))  # 8 elements: code 0, 4 elements: code 1
    table = _table(layout)
    assert list(RankCalls(table, list(range(len(table)))).codes(1, 7, code_of)) == codes


def _hang_of(tmp_path, per_rank):
    import pickle as pk

    from ncclprobe.diagnose.hang import hang as H
    from tests.flight_recorder_dumps import dump as doc_of
    from tests.flight_recorder_dumps import entry as raw

    for rank, calls in per_rank.items():
        doc = doc_of("2.10", rank, [])
        doc["entries"] = [raw("2.10", rank, seq, "all_reduce", 8, state) for seq, state in calls]
        done = [seq for seq, state in calls if state == "completed"]
        doc["pg_status"] = {
            "0": {
                "last_enqueued_collective": max(s for s, _ in calls),
                "last_started_collective": -1,
                "last_completed_collective": max(done, default=0),
            }
        }
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pk.dumps(doc))
    return H.build(fr.read_flight_recorder([tmp_path]))


def test_a_member_that_never_enqueued_what_a_peer_completed_is_missing(tmp_path):
    """gloo marks a collective that failed on its timeout completed: rank 0 'completed' #4, which
    rank 1 never enqueued. #4 is at or below the last completed and yet not done."""
    hang = _hang_of(
        tmp_path,
        {0: [(s, "completed") for s in (1, 2, 3, 4)], 1: [(s, "completed") for s in (1, 2, 3)]},
    )
    (stuck,) = hang.stuck
    assert (stuck.seq, stuck.missing) == (4, (1,))


def test_a_sequence_number_no_member_holds_is_passed_over(tmp_path):
    """#2 is in no dump (lost by every ring, or a p2p-only stretch): the comparison goes on to #4,
    which rank 1 never enqueued."""
    hang = _hang_of(
        tmp_path,
        {
            0: [(1, "completed"), (3, "completed"), (4, "started")],
            1: [(1, "completed"), (3, "completed")],
        },
    )
    (stuck,) = hang.stuck
    assert (stuck.seq, stuck.missing) == (4, (1,))
