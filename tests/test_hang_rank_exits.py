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


# The reviewer's inputs (tests/fixtures/hang_exits/README.md gives each one's truth)
EXITS = Path(__file__).parent / "fixtures" / "hang_exits"
KILLED = (EXITS / "killed.log").read_text()
SIGNALS = {"SIGKILL": 9, "SIGABRT": 6, "SIGSEGV": 11, "SIGBUS": 7, "SIGTERM": 15}


def _ended_by(tmp_path: Path, signal: str, root_cause: bool = True) -> Path:
    """The console with rank 1's root-cause entry ended by `signal` (or, with root_cause False,
    rank 0's SIGTERM entry turned into `signal` and rank 1's into exit code 1)."""
    n = SIGNALS[signal]
    text = KILLED
    if root_cause:
        text = text.replace("-9 (pid: 9140)", f"-{n} (pid: 9140)").replace(
            "Signal 9 (SIGKILL)", f"Signal {n} ({signal})"
        )
    else:
        text = text.replace("-9 (pid: 9140)", "1 (pid: 9140)").replace(
            "-15 (pid: 9139)  (SIGTERM)", f"-{n} (pid: 9139)  ({signal})"
        )
        text = text.replace(
            "Signal 9 (SIGKILL) received by PID 9140",
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        )
        text = text.replace(
            "Signal 15 (SIGTERM) received by PID 9139",
            f"Signal {n} ({signal}) received by PID 9139",
        )
    path = tmp_path / f"{signal}.log"
    path.write_text(text)
    return path


SIGNAL_SAYS = {
    "SIGKILL": "SIGKILL cannot be caught, so the rank could write nothing of its end. The kernel's OOM "
    "killer is its usual sender, which this log cannot show: look for `Out of memory: Killed "
    "process` in `dmesg -T` on its host, or in the scheduler's memory accounting (`sacct "
    "--format=JobID,MaxRSS,State`) for the job.",
    "SIGABRT": "The process aborted itself (C++'s terminate after an uncaught exception, a failed "
    "assertion, or NCCL's watchdog taking the process down; with no watchdog line in the log, the "
    "last is not the reading here): the lines rank 1 wrote just before it say which.",
    "SIGSEGV": "SIGSEGV is a native crash: an invalid memory access in the process (a C/C++/CUDA "
    "extension, a library or the interpreter), not a Python exception. PYTHONFAULTHANDLER=1 in the "
    "rank's environment makes Python print every thread's stack when it happens.",
    "SIGBUS": "SIGBUS is a native crash: a bad memory access (a bus error: often a truncated "
    "memory-mapped file or a full /dev/shm) in the process",
}


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGABRT", "SIGSEGV", "SIGBUS"])
def test_a_rank_ended_by_a_signal_torchrun_did_not_send_is_the_failure(tmp_path, signal):
    result = diagnose(load_evidence(logs=[_ended_by(tmp_path, signal)]))
    top = result.findings[0]
    assert (top.rule, top.severity, top.confidence) == ("hang-rank-exited", "error", "high")
    assert top.title == f"rank 1 was ended by {signal}; rank 0 was stopped by torchrun (SIGTERM)"
    assert top.detail.startswith(
        f"torchrun's summary gives rank 1 exit code -{SIGNALS[signal]}: it was ended by {signal} (its "
        "first observed failure), a signal torchrun did not send to stop it (it stops the others with "
        "SIGTERM), and the log holds no watchdog or timeout line that would make it a rank that gave "
        f"up waiting. {SIGNAL_SAYS[signal]}"
    )
    assert top.detail.endswith(
        "Every collective the others then issued waited for it; rank 0 was stopped by torchrun (SIGTERM)."
    )
    assert "in its own code" not in top.detail and "Fix that exception" not in top.detail
    assert (top.evidence["signal"], top.evidence["because"]) == (signal, "signal")
    assert not any("gave up waiting, not the cause" in n for n in result.notes)
    assert result.verdict().exit_code == 1


def test_a_sigkill_after_torchruns_sigterm_is_its_stop_not_a_failure(tmp_path):
    """The twin: rank 1 exited with code 1 first; rank 0's entry is SIGKILL (torchrun's kill after
    its SIGTERM went unheeded): rank 1 is the failure, rank 0 is not."""
    exits = own_exits(load_evidence(logs=[_ended_by(tmp_path, "SIGKILL", root_cause=False)]))
    assert list(exits) == [1] and exits[1].signal is None and exits[1].exitcode == 1


@pytest.mark.parametrize("signal", ["SIGSEGV", "SIGABRT"])
def test_a_crash_signal_on_a_later_entry_is_a_failure_too(tmp_path, signal):
    exits = own_exits(load_evidence(logs=[_ended_by(tmp_path, signal, root_cause=False)]))
    assert sorted(exits) == [0, 1] and exits[0].signal == signal and not exits[0].root_cause


def test_a_sigterm_first_is_a_stop_from_outside_and_the_job_still_failed(tmp_path):
    result = diagnose(load_evidence(logs=[_ended_by(tmp_path, "SIGTERM")]))
    assert own_exits(load_evidence(logs=[_ended_by(tmp_path, "SIGTERM")])) == {}
    top = result.findings[0]
    assert (top.rule, top.severity) == ("hang-job-failed", "warning")
    assert top.title == (
        "torchrun says the job failed: its first observed failure is rank 1, ended by SIGTERM; the "
        "log does not say why"
    )
    assert "A SIGTERM that comes first is a stop from outside torchrun" in top.detail
    assert not any("gave up waiting" in n for n in result.notes)
    assert result.verdict().exit_code == 1


def test_an_exit_code_without_a_traceback_says_so_and_no_exception(tmp_path):
    result = diagnose(load_evidence(logs=[EXITS / "exit1_no_traceback.log"]))
    top = result.findings[0]
    assert top.title == "rank 1 exited with code 1; rank 0 was stopped by torchrun (SIGTERM)"
    assert top.detail == (
        "torchrun's summary gives rank 1 exit code 1, its own, not a signal (its first observed "
        "failure); its log holds no traceback (run with torch's @record, or read its own stderr). "
        "Rank 1 logged no collective failure of its own, and every collective the others then issued "
        "waited for it; rank 0 was stopped by torchrun (SIGTERM)."
    )
    assert top.evidence["exception"] is None


def test_a_traceback_the_rank_wrote_on_after_was_caught_not_its_end(tmp_path):
    logs = [EXITS / "rank0.log", EXITS / "rank1.log"]
    ev = load_evidence(logs=logs)
    assert own_exits(ev) == {} and ev.job_logs[1].went_on == {1}
    result = diagnose(ev)
    assert not any(f.rule == "hang-rank-exited" for f in result.findings)
    shown = next(f for f in result.findings if f.rule == "not-explained")
    assert shown.severity == "warning"
    assert "ModuleNotFoundError: No module named 'flash_attn'" in shown.detail
    # the twin: the same log cut after its traceback (a teardown warning after it changes nothing)
    text = (EXITS / "rank1.log").read_text()
    cut = text[: text.index("[rank1]: step 2")] + (
        "[rank1]:[W1207 02:59:05.1 ProcessGroupNCCL.cpp:1250] Warning: WARNING: "
        "destroy_process_group() was not called before program exit\n\n"
    )
    ended = tmp_path / "rank1.log"
    ended.write_text(cut)
    top = diagnose(load_evidence(logs=[logs[0], ended])).findings[0]
    assert (
        top.title
        == "rank 1 failed after ModuleNotFoundError: No module named 'flash_attn' (raised at /srv/train.py:12 in <module>)"
    )
    assert "ends in an uncaught traceback" in top.detail


def test_torchruns_numbered_folder_is_the_local_rank(tmp_path):
    own = EXITS / "attempt_0" / "1" / "stderr.log"
    ev = load_evidence(logs=[own])
    assert ev.job_logs[0].local_file_rank == 1
    assert own_exits(ev) == {}  # no global rank: it matches no dump's rank
    result = diagnose(ev)
    assert not any(f.rule == "not-explained" for f in result.findings)  # named once, with its exit
    top = result.findings[0]
    assert top.title.startswith(
        f"local rank 1 ({own}) failed after ValueError: step 4: batch of 0 samples on rank 1"
    )
    assert top.evidence["local_rank_file"] == str(own)
    # the twin: the same lines with torch's own `[rank1]:` prefix show the global rank
    named = tmp_path / "attempt_0" / "1" / "stderr.log"
    named.parent.mkdir(parents=True)
    named.write_text("".join(f"[rank1]: {line}\n" for line in own.read_text().splitlines()))
    ev = load_evidence(logs=[named])
    assert ev.job_logs[0].local_file_rank is None and list(own_exits(ev)) == [1]
    assert diagnose(ev).findings[0].title.startswith("rank 1 failed after ValueError: step 4")


def test_an_exit_code_backs_a_traceback_the_rank_wrote_on_after():
    """The caught traceback's rank beside a summary that gives it exit code 1: the exit code backs
    the traceback, which is then named with it (and the summary alone says no traceback)."""
    exits = own_exits(load_evidence(logs=[EXITS / "rank1.log", EXITS / "exit1_no_traceback.log"]))
    assert exits[1].exitcode == 1
    assert exits[1].exception == "ModuleNotFoundError: No module named 'flash_attn'"
