"""The job-log reader on real logs (torchrun consoles and per-rank stderr of the recorded jobs,
tests/fixtures/flight_recorder) and on lines in the formats of older torch releases, copied from
public job logs (hand-written here, each marked)."""

from pathlib import Path

import pytest

from ncclprobe.evidence.hang.job_log import parse_job_log, read_job_log
from ncclprobe.evidence.hang.job_log_records import WatchdogStatus

RECORDED = Path(__file__).parent / "fixtures" / "flight_recorder"


def test_nccl_skip_console():
    log = read_job_log(RECORDED / "nccl" / "skip" / "torchrun.log")
    (t,) = log.timeouts  # printed twice (line and exception), counted once
    assert (t.rank, t.group, t.group_desc, t.seq, t.op) == (0, "0", "default_pg", 4, "ALLREDUCE")
    assert (t.numel_in, t.numel_out, t.timeout_ms, t.ran_ms) == (1048576, 1048576, 10000, 10099)
    assert t.time == "1201 19:42:17.779706496"
    assert WatchdogStatus(0, "0", "default_pg", 4, 4, 3) in log.statuses
    assert (
        WatchdogStatus(1, "0", "default_pg", None, 3, 3) in log.statuses
    )  # the dump signal's line
    assert log.dump_signals == {0, 1} and log.ranks == {0, 1} and log.hang_seen
    root = [f for f in log.failures if f.root_cause]
    assert [(f.rank, f.exitcode, f.signal, f.pid) for f in root] == [(0, -6, "SIGABRT", 487)]
    assert [(f.rank, f.signal) for f in log.failures if not f.root_cause] == [(1, "SIGTERM")]


def test_a_timeout_line_without_its_group_takes_the_status_lines():
    """`[Rank 0] Watchdog caught ...` names no group; the status line after it does (groups: the
    two timeouts are of two groups with the same sequence number)."""
    log = read_job_log(RECORDED / "nccl" / "groups" / "torchrun.log")
    assert sorted((t.rank, t.group_desc, t.seq) for t in log.timeouts) == [
        (0, "group_a", 2),
        (1, "group_b", 2),
    ]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_ranks_own_stderr_is_attributed_to_it(rank):
    log = read_job_log(RECORDED / "nccl" / "skip" / f"rank{rank}.stderr")
    assert log.ranks == {rank}
    assert [t.rank for t in log.timeouts] == ([0] if rank == 0 else [])


def test_gloo_timeouts_and_a_closed_peer():
    skip = read_job_log(RECORDED / "gloo" / "skip" / "torchrun.log")
    assert skip.gloo_timeouts == {0: 5000} and skip.timeouts == []
    assert (
        skip.errors[0].startswith("RuntimeError: [")
        and "Timed out waiting 5000ms" in skip.errors[0]
    )
    mismatch = read_job_log(RECORDED / "gloo" / "size-mismatch" / "rank1.stderr")
    assert mismatch.peer_closed == {1} and mismatch.ranks == {1}


def test_a_healthy_console_has_nothing_to_say():
    log = read_job_log(RECORDED / "nccl" / "healthy" / "torchrun.log")
    assert not log.hang_seen and log.failures == [] and log.timeouts == []


@pytest.mark.parametrize(
    "line, expected",
    [
        # torch 2.2-2.4 (a public issue's log): no clock in the glog prefix, `[PG 0 Rank 7]`
        (
            "[rank7]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 7] Process group watchdog thread terminated "
            "with exception: [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
            "OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds "
            "before timing out.",
            (7, "0", 1, "BROADCAST", 600017),
        ),
        # without torch's [rankN]: prefix: the rank of the watchdog's own prefix
        (
            "[E1201 19:29:58.123456 11160 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
            "Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
            (3, None, 11, "ALLREDUCE", 600123),
        ),
    ],
)
def test_older_watchdog_lines(line, expected):
    (t,) = parse_job_log(line).timeouts
    assert (t.rank, t.group, t.seq, t.op, t.ran_ms) == expected


@pytest.mark.parametrize(
    "message",
    [
        "Exception (either an error or timeout) detected by watchdog at work: 78, last enqueued NCCL work: 79, "
        "last completed NCCL work: 77.",
        "Timeout at NCCL work: 78, last enqueued NCCL work: 79, last completed NCCL work: 77.",
        " failure detected by watchdog at work sequence id: 78 PG status: last enqueued work: 79, last "
        "completed work: 77",
    ],
)
def test_the_watchdogs_status_in_each_generations_words(message):
    """Hand-written in the three phrasings torch has printed (2.2-2.4, 2.3-2.5, 2.6+)."""
    log = parse_job_log(f"[rank2]:[E810 03:04:11.063 ProcessGroupNCCL.cpp:1] [Rank 2] {message}")
    assert log.statuses == [WatchdogStatus(2, None, None, 78, 79, 77)]


def test_torchrun_without_other_failures():
    """The summary when one rank failed (a public job's tail, hand-written here)."""
    text = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
src.train FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-08-10_03:05:11
  host      : k8s-worker02
  rank      : 7 (local_rank: 7)
  exitcode  : -6 (pid: 2608408)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 2608408
============================================================
"""
    (f,) = parse_job_log(text).failures
    assert (f.rank, f.local_rank, f.exitcode, f.signal, f.pid, f.host, f.root_cause) == (
        7,
        7,
        -6,
        "SIGABRT",
        2608408,
        "k8s-worker02",
        True,
    )


@pytest.mark.parametrize(
    "name, rank",
    [
        ("rank3.stderr", 3),
        ("logs/rank_12.log", 12),
        ("job/attempt_0/5/stderr.log", 5),
        ("run/attempt_2/7/stdout.log", 7),
        ("stderr_rank_1.txt", 1),
        ("train.rank-2.out", 2),
        ("RANK4.LOG", 4),
        ("job.log", None),
        ("megatron_moe_4rank_allreduce_seq305_service_thread_closed_megatron735.log", None),
        ("issue735.log", None),
        ("rank7_run.log", None),  # digits not at the end: a run's name, not a rank's file
        ("4rank_job.log", None),
        ("crank3.log", None),  # no separator before `rank`
        ("rank3.json", None),  # not a log's extension
        ("logs/3/trace.log", None),  # a numbered folder gives a rank only to torchrun's streams
    ],
)
def test_the_file_name_gives_the_rank_of_lines_that_carry_none(name, rank):
    log = parse_job_log("RuntimeError: boom\n", name)
    assert log.errors == ({} if rank is None else {rank: "RuntimeError: boom"})
    assert log.ranks == (set() if rank is None else {rank})


MEGATRON = (
    Path(__file__).parent
    / "fixtures"
    / "unseen"
    / "job_logs"
    / "megatron_moe_4rank_allreduce_seq305_service_thread_closed_megatron735.log"
)


@pytest.mark.parametrize("name", ["rank7.log", "job_rank7.log", "7/stderr.log", "job.log"])
def test_a_console_of_several_ranks_gives_its_name_no_rank(tmp_path, name):
    """Watchdog lines of ranks 0-2 with NCCL INFO lines that carry no rank prefix: whatever the
    file is called, no rank beyond those the lines name is made up (review 2026-12-07: the real
    log read under its issue's name said `rank 735 logged no timeout`)."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(MEGATRON.read_text())
    log = read_job_log(path)
    assert log.ranks == {0, 1, 2}
    assert read_job_log(MEGATRON).ranks == {0, 1, 2}


@pytest.mark.parametrize(
    "text, errors, ranks",
    [  # in `logs/rank3.log`: its own prefixes agree, so the unprefixed line is rank 3's too
        (
            "[rank3]: RuntimeError: boom\nValueError: unprefixed\n",
            {3: "ValueError: unprefixed"},
            {3},
        ),
        ("[Rank 3] Watchdog went away\nRuntimeError: boom\n", {3: "RuntimeError: boom"}, {3}),
        # another rank's prefix, or a launcher's --tee console: the name gives no rank
        ("[rank2]: RuntimeError: boom\nValueError: unprefixed\n", {2: "RuntimeError: boom"}, {2}),
        ("[default3]:[rank3]: x\nRuntimeError: boom\n", {}, {3}),
    ],
)
def test_a_rank_file_whose_lines_name_another_rank_is_no_rank_file(text, errors, ranks):
    log = parse_job_log(text, "logs/rank3.log")
    assert (log.errors, log.ranks) == (errors, ranks)


def test_a_file_rank_at_or_above_the_jobs_size_is_no_rank():
    """NCCL's communicator lines say the job has 2 ranks: `rank2.log` is no rank's file of it (the
    boundary: ranks count from 0), `rank1.log` is."""
    comm = "host:1:1 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
    assert parse_job_log(comm + "RuntimeError: boom\n", "rank2.log").errors == {}
    assert parse_job_log(comm + "RuntimeError: boom\n", "rank1.log").errors == {
        1: "RuntimeError: boom"
    }


def test_garbage_is_skipped_never_an_error():
    log = parse_job_log(
        "\x00\x01 [rank]: [E] WorkNCCL(SeqNum=x\n[rank99999999999999999999]:\nFailures:\n[1]:\n"
    )
    assert log.timeouts == [] and log.lines == 4
