"""The log-only hang reading agrees with the dump reading on the same job (issue 36 §3's done
criterion): the real recordings of tests/fixtures/flight_recorder (NCCL on one H200; gloo with two
and three ranks on this CPU machine, with and without TORCH_DISTRIBUTED_DEBUG=DETAIL), each read
twice, from the ranks' logs alone and from the ranks' Flight Recorder dumps alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.hang import hang as H
from ncclprobe.diagnose.hang.log_collectives import stuck_collectives
from ncclprobe.evidence.hang.flight_recorder import read_flight_recorder

RECORDED = Path(__file__).parent / "fixtures" / "flight_recorder"


def logs(folder: Path) -> list[Path]:
    return sorted(folder.glob("rank*.stderr"))


def dump_reading(folder: Path, form: str = "dumps") -> set[tuple]:
    """(because, seq, the ranks missing) of each stuck collective the dumps show (`form`: "json"
    for the recorder's JSON twin of each pickle)."""
    hang = H.build(read_flight_recorder([folder / form]))
    return {(s.because, s.seq, tuple(s.missing)) for s in hang.stuck}


def log_reading(folder: Path) -> set[tuple]:
    """The same, from the logs alone: the watchdog's numbers, else DETAIL's checks."""
    ev = load_evidence(logs=logs(folder))
    out = {
        (s.because, s.seq, s.silent if s.because == "missing" else ())
        for s in stuck_collectives(ev)
    }
    for f in diagnose(ev).findings:
        because = f.evidence.get("because")
        detail = "timed_out_ranks" not in f.evidence  # DETAIL's checks, not a watchdog line
        if because and "seq" in f.evidence and detail:
            out.add((because, f.evidence["seq"], ()))
    return out


@pytest.mark.parametrize("scenario", ["skip", "p2p"])
def test_nccl_jobs_missing_rank(scenario):
    """skip: rank 1 never enters all_reduce #4; p2p: its collective stream stops at the unmatched
    send. Both readings name the same rank at the same number."""
    folder = RECORDED / "nccl" / scenario
    from_log = {(b, seq, missing) for b, seq, missing in log_reading(folder) if b == "missing"}
    if scenario == "skip":
        assert from_log == {("missing", 4, (1,))} == dump_reading(folder)
    else:  # the dumps name the send in their p2p reading; the log's watchdog line is the SEND
        ev = load_evidence(logs=logs(folder))
        [s] = stuck_collectives(ev)
        assert (s.because, s.silent, next(iter(s.calls.values())).op) == ("missing", (1,), "SEND")


def test_nccl_groups_cycle_agrees():
    folder = RECORDED / "nccl" / "groups"
    from_log = diagnose(load_evidence(logs=logs(folder))).findings[0]
    from_dumps = diagnose(load_evidence(flight_recorder=[folder / "dumps"])).findings[0]
    assert from_log.rule == from_dumps.rule == "hang-groups"
    pairs = lambda f: sorted(
        (c["waiting_rank"], c["missing_rank"], c["seq"]) for c in f.evidence["cycle"]
    )  # noqa: E731
    assert pairs(from_log) == pairs(from_dumps) == [(0, 1, 2), (1, 0, 2)]


@pytest.mark.parametrize(
    "scenario, expected",
    [("order", {("mismatch", 4, ())}), ("size-mismatch", {("mismatch", 4, ())})],
)
def test_three_gloo_ranks_with_detail_agree_with_their_own_dumps(scenario, expected):
    """DETAIL's checks give the log every rank's numbers; its dumps hold the job's group and DETAIL's
    own checks under one empty name, told apart by pg_id: the check of #4 ran on every rank and no
    rank issued #4, which is the mismatch the log names."""
    folder = RECORDED / "gloo3-detail" / scenario
    assert log_reading(folder) == expected == dump_reading(folder) == dump_reading(folder, "json")
    both = diagnose(load_evidence(logs=logs(folder), flight_recorder=[folder / "dumps"]))
    errors = [f for f in both.findings if f.severity == "error"]
    assert [(f.rule, f.evidence["seq"]) for f in errors] == [("hang-mismatch", 4)]
    assert "Rank" not in errors[0].title and "rank 1: " in errors[0].title  # the log's own words


def test_a_rank_detail_never_let_reach_a_check_is_in_the_log_only():
    """skip with DETAIL: rank 2 never reached the check's barrier, which the recorder does not keep.
    The dumps show nothing pending and say why they cannot show it; the log names rank 2."""
    folder = RECORDED / "gloo3-detail" / "skip"
    skip = diagnose(load_evidence(logs=logs(folder))).findings[0]
    assert skip.evidence == {"because": "missing", "missing_ranks": [2]}
    assert dump_reading(folder) == set()
    dumps = diagnose(load_evidence(flight_recorder=[folder / "dumps"])).findings[0]
    assert dumps.rule == "hang-none-pending" and "failed to pass monitoredBarrier" in dumps.detail
    both = diagnose(load_evidence(logs=logs(folder), flight_recorder=[folder / "dumps"]))
    assert both.findings[0].evidence == {"because": "missing", "missing_ranks": [2]}
    assert dump_reading(RECORDED / "gloo3" / "skip") == {("missing", 4, (2,))}  # without DETAIL


def test_the_late_rank_is_never_said_to_wait_for_itself():
    """Three ranks, the last one late: the log names it missing, never waiting for itself."""
    for folder in (RECORDED / "gloo3-detail" / "skip", RECORDED / "nccl" / "skip"):
        for f in diagnose(load_evidence(logs=logs(folder))).findings:
            for link in f.evidence.get("cycle", []):
                assert link["waiting_rank"] != link["missing_rank"]


@pytest.mark.parametrize("folder", ["gloo3/skip", "gloo3/order", "gloo/skip"])
def test_a_plain_gloo_log_claims_nothing_the_dumps_contradict(folder):
    """Without DETAIL gloo's timeout names no collective: the log reading says so, low confidence,
    and names no rank missing and no call."""
    result = diagnose(load_evidence(logs=logs(RECORDED / folder)))
    claims = [f for f in result.findings if f.rule.startswith("hang-") and f.severity == "error"]
    assert claims == []
    [gloo] = [f for f in result.findings if f.rule == "hang-watchdog"]
    assert gloo.confidence == "low" and "cannot be read from the log" in gloo.detail


@pytest.mark.parametrize("folder", ["gloo3/healthy", "gloo3-detail/healthy", "nccl/healthy"])
def test_healthy_jobs_are_clean_in_both_readings(folder):
    result = diagnose(load_evidence(logs=logs(RECORDED / folder)))
    assert [f.rule for f in result.findings if f.severity != "info"] == []


# The watchdog lines of the recorded NCCL job (nccl/skip, rank 0), re-numbered per case: NCCL ran
# the recorded order swap and size mismatch to completion, so their watchdog lines are the recorded
# skip's with the other rank's call written in (the format is torch 2.11's, as recorded).
LINE = (
    "[rank{r}]:[E1201 19:42:17.779706496 ProcessGroupNCCL.cpp:689] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=10000) "
    "ran for 10099 milliseconds before timing out.\n"
    "[rank{r}]:[E1201 19:42:17.779880134 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    "  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, "
    "last completed work: {done}\n"
)


def _read(tmp_path, *lines):
    path = tmp_path / "job.log"
    path.write_text("".join(lines))
    return diagnose(load_evidence(logs=[path]))


def test_an_order_swap_in_watchdog_lines_is_one_mismatch(tmp_path):
    result = _read(
        tmp_path,
        LINE.format(r=0, seq=4, op="ALLREDUCE", n=1048576, done=3),
        LINE.format(r=1, seq=4, op="BROADCAST", n=262144, done=3),
    )
    errors = [f for f in result.findings if f.severity == "error"]
    assert [f.rule for f in errors] == ["hang-mismatch"]
    assert (
        errors[0].evidence["differs_in"] == "operation" and "never entered" not in errors[0].title
    )


def test_a_size_mismatch_in_watchdog_lines_names_both_sizes(tmp_path):
    result = _read(
        tmp_path,
        LINE.format(r=0, seq=4, op="ALLREDUCE", n=1024, done=3),
        LINE.format(r=1, seq=4, op="ALLREDUCE", n=4096, done=3),
    )
    top = result.findings[0]
    assert top.rule == "hang-mismatch" and top.evidence["differs_in"] == "size"
    assert "rank 0: ALLREDUCE of 1,024 elements; rank 1: ALLREDUCE of 4,096 elements" in top.title
    # the healthy twin: the same size on both is no mismatch
    same = _read(
        tmp_path,
        LINE.format(r=0, seq=4, op="ALLREDUCE", n=1024, done=3),
        LINE.format(r=1, seq=4, op="ALLREDUCE", n=1024, done=3),
    )
    assert same.findings[0].rule == "hang-watchdog" and same.findings[0].severity == "warning"


@pytest.mark.parametrize(
    "seq, done, rule", [(1, 0, "hang-first-collective"), (2, 1, "hang-watchdog")]
)
def test_a_first_collective_that_never_completed_is_an_init_or_transport_hang(
    tmp_path, seq, done, rule
):
    result = _read(
        tmp_path,
        LINE.format(r=0, seq=seq, op="ALLREDUCE", n=1024, done=done),
        LINE.format(r=1, seq=seq, op="ALLREDUCE", n=1024, done=done),
    )
    top = result.findings[0]
    assert top.rule == rule
    if rule == "hang-first-collective":
        assert "init or transport" in top.detail and top.severity == "error"


def test_the_findings_say_it_word_for_word(tmp_path):
    """The titles and details the log-only reading prints, pinned (a changed word is a changed claim)."""
    swap = _read(
        tmp_path,
        LINE.format(r=0, seq=4, op="ALLREDUCE", n=1048576, done=3),
        LINE.format(r=1, seq=4, op="BROADCAST", n=262144, done=3),
    ).findings[0]
    assert swap.title == (
        "#4 of default_pg differs between ranks (operation): rank 0: ALLREDUCE of 1,048,576 elements; "
        "rank 1: BROADCAST of 262,144 elements"
    )
    assert swap.detail == (
        "A group's collective #4 must be the same call on every member; the watchdog lines of the "
        "ranks show different calls there: rank 0: ALLREDUCE of 1,048,576 elements; rank 1: BROADCAST "
        "of 262,144 elements. The ranks issue collectives in different orders, or some rank issues a "
        "collective the others do not (the dumps tell a swap, where each call shows up later on the "
        "other rank)."
    )
    size = _read(
        tmp_path,
        LINE.format(r=0, seq=4, op="ALLREDUCE", n=1024, done=3),
        LINE.format(r=1, seq=4, op="ALLREDUCE", n=4096, done=3),
    ).findings[0]
    assert size.detail.endswith("The ranks pass tensors of different sizes to the same collective.")
    assert (size.rule, size.severity, size.confidence) == ("hang-mismatch", "error", "high")
    groups = diagnose(load_evidence(logs=logs(RECORDED / "nccl" / "groups"))).findings[0]
    assert groups.title == (
        "group_a and group_b wait on each other: rank 0 waits in group_a #2 (ALLREDUCE) for rank 1; "
        "rank 1 waits in group_b #2 (ALLREDUCE) for rank 0"
    )
    assert (groups.severity, groups.confidence) == ("error", "medium")
    assert groups.detail.startswith(
        "Each rank's first watchdog timeout is in a collective of one group that misses a rank whose "
        "own first timeout is in the other: rank 0 waits in group_a #2 (ALLREDUCE) for rank 1; rank 1 "
        "waits in group_b #2 (ALLREDUCE) for rank 0. The ranks issue the groups' collectives in "
        "different orders and each blocks in its first (inferred from the log; the dumps show it)."
    )
    assert groups.evidence["cycle"][0] == {
        "group": "1",
        "seq": 2,
        "waiting_rank": 0,
        "missing_rank": 1,
    }
    detail = diagnose(load_evidence(logs=logs(RECORDED / "gloo3-detail" / "order"))).findings[0]
    assert detail.title == (
        "collective #4 differs between ranks (operation): rank 0: ALLREDUCE of 1,048,576 elements; "
        "rank 1: BROADCAST of 262,144 elements; rank 2: ALLREDUCE of 1,048,576 elements"
    )
    assert "(its SequenceNumber=3 counts from 0)" in detail.detail


def test_the_watchdog_findings_evidence_and_its_times(tmp_path):
    """What a log-only finding carries, key by key, on the recorded NCCL skip (rank 0's lines)."""
    f = diagnose(load_evidence(logs=logs(RECORDED / "nccl" / "skip"))).findings[0]
    assert f.evidence["group"] == "0" and f.evidence["because"] == "missing"
    assert f.evidence["calls"] == {"0": "ALLREDUCE of 1,048,576 elements"}
    assert f.evidence["ran_ms"] == {"0": 10099} and "after 10099 ms" in f.detail
    groups = diagnose(load_evidence(logs=logs(RECORDED / "nccl" / "groups"))).findings[0]
    assert groups.detail.endswith(
        "Issue collectives of different groups in one order on every rank."
    )


def test_dumps_alone_never_clear_a_detail_job_the_log_says_hung():
    """gloo3-detail/skip (review 2026-12-07): the dumps alone once said `[info] every rank completed
    every collective`, exit 0, while the log names rank 2. With DETAIL the dumps of that job and of
    its healthy twin read the same (the check's monitored barrier is not recorded; rank 0's larger
    check count, 18 against 12 here and 36 against 24 in the healthy twin, is the barrier it
    coordinates): so dumps alone never clear a DETAIL job, and never contradict the log."""
    folder = RECORDED / "gloo3-detail" / "skip"
    dumps_only = diagnose(load_evidence(flight_recorder=[folder / "dumps"]))
    top = dumps_only.findings[0]
    assert (top.rule, top.severity) == ("hang-none-pending", "warning")
    assert "not a clean verdict" in top.title and dumps_only.verdict().exit_code == 1
    assert not any(
        f.severity == "info" and "completed every" in f.title for f in dumps_only.findings
    )
    assert any(
        "rank 0's count (18) also holds the monitored barrier" in n for n in dumps_only.notes
    )
    # the log-only reading and the reading of both name rank 2, and the dumps say nothing against it
    for ev in (
        load_evidence(logs=logs(folder)),
        load_evidence(logs=logs(folder), flight_recorder=[folder / "dumps"]),
    ):
        first = diagnose(ev).findings[0]
        assert first.evidence == {"because": "missing", "missing_ranks": [2]}
    # the healthy twin: dumps alone are not a clean verdict either (they cannot be), its log clears it
    healthy = RECORDED / "gloo3-detail" / "healthy"
    assert (
        diagnose(load_evidence(flight_recorder=[healthy / "dumps"])).findings[0].severity
        == "warning"
    )
    cleared = diagnose(load_evidence(logs=logs(healthy), flight_recorder=[healthy / "dumps"]))
    assert (cleared.findings[0].severity, cleared.verdict().exit_code) == ("info", 0)


def test_a_member_that_enqueued_fewer_is_named_though_nothing_is_pending(tmp_path):
    """Any group whose members' enqueued counts differ is no clean verdict: the recorded healthy
    3-rank gloo job's dumps, each less its last entry (#6), with rank 2's status saying it enqueued
    5 (the others 6): nothing is pending, and rank 2 is named behind. The twin: the same dumps with
    rank 2's status left at 6 are clean (no group, no DETAIL: info)."""
    import pickle
    import shutil

    source = RECORDED / "gloo3" / "healthy" / "dumps"
    for behind in (True, False):
        folder = tmp_path / f"behind-{behind}"
        shutil.copytree(source, folder)
        for rank in range(3):
            path = folder / f"nccl_trace_rank_{rank}"
            dump = pickle.loads(path.read_bytes())  # noqa: S301 (our own recording)
            dump["entries"] = dump["entries"][:-1]
            if behind and rank == 2:
                dump["pg_status"]["0"].update(
                    last_enqueued_collective=5, last_completed_collective=5
                )
            path.write_bytes(pickle.dumps(dump))
        top = diagnose(load_evidence(flight_recorder=[folder])).findings[0]
        if behind:
            assert (top.rule, top.severity, top.evidence["behind"]) == (
                "hang-none-pending",
                "warning",
                [2],
            )
            assert (
                "rank 2 issued fewer: default_pg: rank 2 enqueued 5, the others up to 6"
                in top.title
            )
        else:
            assert (top.rule, top.severity) == ("hang-none-pending", "info")
