"""A rank that failed by itself is read as a dead rank, not as one in host code (review 2026-12-07).

Real jobs recorded on this CPU machine (`examples/record_flight_recorder.py OUT --backend gloo
--scenario crash`, 2 ranks with `--record-errors` and 3 without: tests/fixtures/flight_recorder/
gloo{,3}/crash): the last rank raises ValueError before the 4th all_reduce and exits with code 1; the
others wait in it and torchrun stops them (SIGTERM). Their twins are the recorded `skip` jobs, whose last rank stays in host code: there
the first failure torchrun sees is a rank that gave up waiting, and nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.hang.rank_exits import own_exits
from ncclprobe.evidence.hang.job_log import parse_job_log

RECORDED = Path(__file__).parent / "fixtures" / "flight_recorder"
CRASH = {2: RECORDED / "gloo" / "crash", 3: RECORDED / "gloo3" / "crash"}


def _both(folder: Path):
    return load_evidence(logs=[folder / "torchrun.log"], flight_recorder=[folder / "dumps"])


@pytest.fixture(scope="module")
def readings():
    """Each recorded crash read once with its dumps and once from its console alone."""
    out = {}
    for n, folder in CRASH.items():
        ev = _both(folder)
        out[n] = (ev, diagnose(ev), diagnose(load_evidence(logs=[folder / "torchrun.log"])))
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_the_dead_rank_is_the_headline_with_its_exit_and_traceback(readings, n):
    ev, with_dumps, log_only = readings[n]
    dead, rest = n - 1, ("rank 0 was" if n == 2 else "ranks 0, 1 were")
    for result in (with_dumps, log_only):
        top = result.findings[0]
        assert (top.rule, top.severity, top.confidence) == ("hang-rank-exited", "error", "high")
        assert top.title.startswith(
            f"rank {dead} exited with code 1 after ValueError: step 4: batch of 0 samples on rank {dead}"
            " (raised at "
        )
        assert top.title.endswith(f"in crash); {rest} stopped by torchrun (SIGTERM)")
        assert top.evidence["exitcode"] == 1 and top.evidence["root_cause"] is True
        # the exception is explained here, not repeated as a line nobody explains
        assert not any(f.rule == "not-explained" for f in result.findings)
        assert result.verdict().exit_code == 1
    missing = next(f for f in with_dumps.findings if f.rule == "hang-missing-rank")
    assert missing.evidence["missing_ranks"] == [dead]
    assert "outside the collectives" not in missing.detail
    assert f"it never will, the log says rank {dead} exited with code 1 after ValueError" in (
        missing.detail
    )
    notes = " ".join(with_dumps.notes)
    assert "gave up waiting" not in notes
    assert f"first observed failure is rank {dead} (exit code 1); {rest} stopped" in notes


def test_a_ranks_own_stderr_alone_says_it_failed_without_an_exit_code():
    folder = CRASH[2]
    result = diagnose(load_evidence(logs=[folder / "rank0.stderr", folder / "rank1.stderr"]))
    top = result.findings[0]
    assert (top.rule, top.confidence, top.evidence["exitcode"]) == (
        "hang-rank-exited",
        "medium",
        None,
    )
    assert top.title.startswith("rank 1 failed after ValueError: step 4")
    assert top.evidence["root_cause"] is False  # no summary: not torchrun's first observed failure


SUMMARY = (
    "Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-07_02:47:51\n"
    "  host      : localhost\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 7)\n"
    "  error_file: <N/A>\n============================================================\n"
)


@pytest.mark.parametrize(
    "text",
    [
        # its watchdog timed out first: a rank that gave up waiting, whatever it raised after
        "[rank0]:[E1201 19:42:17.779706496 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
        "Timeout(ms)=10000) ran for 10099 milliseconds before timing out.\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "train.py", line 9, in step\n'
        "[rank0]: RuntimeError: step failed\n" + SUMMARY,
        # an exception line with no traceback and no summary: no exit is read from it
        "[rank0]: RuntimeError: step failed\n",
    ],
)
def test_no_exit_of_its_own_where_the_rank_waited_or_no_exit_is_shown(tmp_path, text):
    path = tmp_path / "job.log"
    path.write_text(text)
    assert own_exits(load_evidence(logs=[path])) == {}


def test_a_watchdog_timeout_on_the_others_names_the_dead_rank_not_a_silent_one(tmp_path):
    """NCCL's wording: rank 0's watchdog times out in #4 and its summary entry is the watchdog's
    SIGABRT; rank 1 exited first with its own exception. The recorded console with rank 0's
    watchdog lines (the recorded NCCL skip's, torch 2.11) written in before torchrun's summary."""
    console = (CRASH[2] / "torchrun.log").read_text()
    watchdog = (
        "[default0]:[rank0]:[E1201 19:42:17.779706496 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1048576, "
        "NumelOut=1048576, Timeout(ms)=10000) ran for 10099 milliseconds before timing out.\n"
        "[default0]:[rank0]:[E1201 19:42:17.779880134 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID "
        "0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 4 PG status: last "
        "enqueued work: 4, last completed work: 3\n"
    )
    head, summary = console.split("Failures:", 1)
    aborted = summary.replace("-15 (pid", "-6 (pid").replace("(SIGTERM)", "(SIGABRT)")
    path = tmp_path / "job.log"
    path.write_text(head + watchdog + "Failures:" + aborted)
    result = diagnose(load_evidence(logs=[path]))
    rules = [f.rule for f in result.findings if f.severity == "error"]
    assert rules == ["hang-rank-exited", "hang-watchdog"]
    top, watch = result.findings[0], result.findings[1]
    assert top.title.endswith("rank 0 was ended by SIGABRT (the watchdog's abort)")
    assert watch.title.startswith(
        "rank 0 timed out in ALLREDUCE #4 of default_pg (1,048,576 elements), which rank 1 never "
        "entered: rank 1 exited with code 1 after ValueError: step 4"
    )
    assert watch.confidence == "high" and "likely never entered" not in watch.title
    assert "gave up waiting" not in " ".join(result.notes)


@pytest.mark.parametrize("folder", ["gloo/skip", "gloo3/skip", "nccl/skip"])
def test_the_twin_whose_rank_stays_in_host_code_is_unchanged(folder):
    """The first observed failure is the rank that gave up waiting (gloo's timeout: exit code 1;
    NCCL's watchdog: SIGABRT): no rank failed by itself, the caution stays, the rank is in host code."""
    ev = _both(RECORDED / folder)
    assert own_exits(ev) == {}
    result = diagnose(ev)
    assert result.findings[0].rule == "hang-missing-rank"
    assert "outside the collectives (host code" in result.findings[0].detail
    assert any("often the one that gave up waiting" in n for n in result.notes)


def test_any_exception_name_ends_a_ranks_traceback_and_its_source_lines_are_context():
    log = parse_job_log(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 40, in <module>\n'
        "[rank1]:     main()\n"
        '[rank1]:   File "train.py", line 31, in step\n'
        "[rank1]:     raise BadBatch('error in batch')\n"
        "[rank1]:     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "[rank1]: BadBatch: no samples left\n"
        "[rank0]: RuntimeError: boom\n",
        "job.log",
    )
    assert log.errors == {1: "BadBatch: no samples left", 0: "RuntimeError: boom"}
    assert log.raised_at == {1: "train.py:31 in step"}
    # the frame's source line (`raise BadBatch('error in batch')`) is no failure of its own; the
    # exception is the rank's error, named with its exit by the hang reading (`rank_exits`)
    assert [line.text for line in log.failure_lines.lines] == ["RuntimeError: boom"]


def test_torchruns_summary_alone_names_the_exception_where_the_rank_ran_under_record(tmp_path):
    """Only torchrun's summary pasted (the 2-rank job ran under torch's @record): the root cause's
    traceback in it gives the exception and where it was raised; the healthy twin is the 3-rank
    job's summary, whose root cause has no traceback: its exit code alone."""
    for n, exception in ((2, "ValueError: step 4: batch of 0 samples on rank 1"), (3, None)):
        console = (CRASH[n] / "torchrun.log").read_text()
        path = tmp_path / f"summary{n}.log"
        path.write_text(console[console.index("=" * 60) :])
        result = diagnose(load_evidence(logs=[path]))
        top = result.findings[0]
        assert (top.rule, top.evidence["exitcode"], top.evidence["exception"]) == (
            "hang-rank-exited",
            1,
            exception,
        )
        if exception:
            assert top.evidence["raised_at"].endswith("record_flight_recorder.py:407 in crash")
            assert not any(f.rule == "not-explained" for f in result.findings)
        else:
            assert top.title == (
                "rank 2 exited with code 1; ranks 0, 1 were stopped by torchrun (SIGTERM)"
            )
