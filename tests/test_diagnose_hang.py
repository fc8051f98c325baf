"""diagnose on a hung job: recorded gloo jobs (tests/fixtures/flight_recorder/gloo: real torchrun
jobs, torch 2.13's own Flight Recorder), hand-written dumps of every shape a rule reads
(tests/flight_recorder_dumps.py, marked there), job logs and NCCL logs. Every rule has its healthy
twin; every threshold is pinned at its boundary."""

import json
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.hang import hang as H
from tests.flight_recorder_dumps import T0, dump, entry, write_job

FIXTURES = Path(__file__).parent / "fixtures"
GLOO = FIXTURES / "flight_recorder" / "gloo"
NCCL_LOGS = FIXTURES / "nccl_logs"


def run(*args):
    return CliRunner().invoke(cli, ["diagnose", *map(str, args)], prog_name="ncclprobe")


def diagnosis(**kwargs):
    return diagnose(load_evidence(**kwargs))


def rules(result, severities=("error", "warning")):
    return [f.rule for f in result.findings if f.severity in severities]


# ---- the recorded jobs ------------------------------------------------------------------------


def test_skip_names_the_rank_the_sequence_number_and_the_collective_the_others_wait_in():
    result = diagnosis(
        flight_recorder=[GLOO / "skip" / "dumps"], logs=[GLOO / "skip" / "torchrun.log"]
    )
    top = result.findings[0]
    assert top.rule == "hang-missing-rank" and top.severity == "error"
    assert top.title.startswith(
        "rank 1 never entered collective 4 of default_pg (all_reduce of [1048576]"
    )
    assert "that rank 0 waits in" in top.title
    assert top.evidence["missing_ranks"] == [1] and top.evidence["waiting_ranks"] == [0]
    assert top.evidence["last_completed"] == {"1": 3}
    assert "record_flight_recorder.py:249 warmup" in top.detail  # where rank 1 last was
    assert "nothing of rank 1 is pending in any group" in top.detail
    assert [f.rule for f in result.findings if f.severity != "info"] == ["hang-missing-rank"]


def test_size_mismatch_names_both_sizes_and_the_ranks():
    result = diagnosis(flight_recorder=[GLOO / "size-mismatch" / "dumps"])
    top = result.findings[0]
    assert top.rule == "hang-mismatch" and top.evidence["differs_in"] == ["input sizes"]
    assert (
        "rank 0: all_reduce of [1048576] Float; rank 1: all_reduce of [2097152] Float" in top.title
    )
    assert top.evidence["seq"] == 4 and set(top.evidence["calls"]) == {"0", "1"}
    # gloo marked rank 0's (smaller) call completed: said as gloo's record, not as a success
    assert "gloo marks a collective completed" in top.detail


def test_order_on_gloo_shows_as_different_operations_at_one_sequence_number():
    """gloo blocks in the first call, so the second never reaches the recorder: one mismatch."""
    top = diagnosis(flight_recorder=[GLOO / "order" / "dumps"]).findings[0]
    assert top.rule == "hang-mismatch" and top.evidence["differs_in"] == [
        "operation",
        "input sizes",
    ]
    assert "rank 0: all_reduce of [1048576] Float; rank 1: broadcast of [262144] Float" in top.title


def test_groups_that_wait_on_each_other_are_one_cycle():
    result = diagnosis(
        flight_recorder=[GLOO / "groups" / "dumps"], logs=[GLOO / "groups" / "torchrun.log"]
    )
    top = result.findings[0]
    assert top.rule == "hang-groups" and rules(result) == ["hang-groups"]
    assert top.title == (
        "group_a and group_b wait on each other: rank 0 waits in group_a #2 (all_reduce) for rank 1; "
        "rank 1 waits in group_b #2 (all_reduce) for rank 0"
    )


@pytest.mark.parametrize("with_log", [False, True])
def test_the_healthy_run_raises_nothing_above_informational(with_log):
    logs = [GLOO / "healthy" / "torchrun.log"] if with_log else []
    result = diagnosis(flight_recorder=[GLOO / "healthy" / "dumps"], logs=logs)
    assert rules(result) == [] and result.verdict().name == "FINE"
    # gloo's bookkeeping lags: the explicit dump caught the last all_reduce still open on both ranks
    assert [f.rule for f in result.findings] == ["hang-in-flight"]
    cli_result = run("--flight-recorder", GLOO / "healthy" / "dumps")
    assert cli_result.exit_code == 0, cli_result.output


@pytest.mark.parametrize("scenario", ["skip", "size-mismatch", "order", "groups"])
def test_each_hung_recording_exits_1_and_its_json_names_the_groups(scenario):
    result = run(
        "--flight-recorder",
        GLOO / scenario / "dumps",
        "--log",
        GLOO / scenario / "torchrun.log",
        "--format",
        "json",
    )
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["evidence_kind"] == "job" and doc["findings"][0]["severity"] == "error"
    groups = {g["label"]: g for g in doc["process_groups"]}
    assert "default_pg" in groups and groups["default_pg"]["members"] == [0, 1]


def test_json_dumps_diagnose_like_the_pickles():
    """Each rank's JSON was written just after its pickle: the hung jobs read the same; the healthy
    one's JSON caught gloo's bookkeeping done (nothing in flight any more): still nothing above info."""
    for scenario in ("skip", "size-mismatch", "groups"):
        a = diagnosis(flight_recorder=[GLOO / scenario / "dumps"])
        b = diagnosis(flight_recorder=[GLOO / scenario / "json"])
        assert [f.rule for f in a.findings] == [f.rule for f in b.findings], scenario
    healthy = diagnosis(flight_recorder=[GLOO / "healthy" / "json"])
    assert [f.rule for f in healthy.findings] == ["hang-none-pending"] and rules(healthy) == []


def test_csv_output_has_a_row_per_finding():
    result = run("--flight-recorder", GLOO / "skip" / "dumps", "--format", "csv")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1].split(",")[:4] == [
        "1",
        "error",
        "high",
        "hang-missing-rank",
    ]


# ---- hand-written: every rule and its twin ------------------------------------------------------


def test_a_missing_rank_in_every_schema_version(tmp_path):
    """The same skipped collective read from the oldest and newest dumps."""
    for version in ("1.4", "2.2", "2.3", "2.10"):
        calls = {
            0: [("all_reduce", 8, "completed")] * 3 + [("all_reduce", 8, "started")],
            1: [("all_reduce", 8, "completed")] * 3,
        }
        top = diagnosis(flight_recorder=[write_job(tmp_path / version, version, calls)]).findings[0]
        assert (top.rule, top.evidence["missing_ranks"], top.evidence["seq"]) == (
            "hang-missing-rank",
            [1],
            4,
        ), version
        assert "/job/train.py:43 step" in top.detail, version  # rank 1's last call


def test_version_1_1_without_pg_config_takes_every_dumped_rank(tmp_path):
    job = {
        0: [("all_reduce", 8, "completed"), ("all_reduce", 8, "scheduled")],
        1: [("all_reduce", 8, "completed")],
    }
    dumps = [_read(dump("1.1", r, c), r, tmp_path) for r, c in job.items()]
    hang = H.build(dumps)
    assert hang.groups["0"].members == (0, 1) and not hang.groups["0"].members_recorded
    assert hang.stuck[0].missing == (1,)


def test_a_collective_done_on_one_member_with_every_member_in_it_is_done(tmp_path):
    """The healthy twin of a stuck collective: a dump taken as it finished."""
    calls = {
        0: [("all_reduce", 8, "completed")] * 2,
        1: [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")],
    }
    result = diagnosis(flight_recorder=[write_job(tmp_path, "2.10", calls)])
    assert [f.rule for f in result.findings] == ["hang-none-pending"] and result.findings[
        0
    ].severity == "info"


def test_completed_everywhere_with_a_timeout_in_the_log_is_a_hang_elsewhere(tmp_path):
    calls = {r: [("all_reduce", 8, "completed")] * 2 for r in (0, 1)}
    log = tmp_path / "job.log"
    log.write_text(WATCHDOG.format(rank=0, seq=3, done=2))
    result = diagnosis(flight_recorder=[write_job(tmp_path / "d", "2.10", calls)], logs=[log])
    top = result.findings[0]
    assert (
        top.rule == "hang-none-pending"
        and top.severity == "warning"
        and "the hang is elsewhere" in top.title
    )


@pytest.mark.parametrize(
    "change, differs",
    [
        (lambda e: e.update(input_sizes=[[16]], output_sizes=[[16]]), ["input sizes"]),
        (
            lambda e: e.update(input_dtypes=["BFloat16"], output_dtypes=["BFloat16"]),
            ["input dtypes"],
        ),
        (lambda e: e.update(profiling_name="nccl:all_gather"), ["operation"]),
        (lambda e: e.update(output_sizes=[[16]]), ["output sizes"]),
        (lambda e: None, None),  # the healthy twin: the same call on both ranks
    ],
)
def test_a_mismatch_names_what_differs(tmp_path, change, differs):
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")])
        for r in (0, 1)
    }
    change(docs[1]["entries"][1])
    result = diagnosis(flight_recorder=_write(tmp_path, docs))
    found = [f for f in result.findings if f.rule == "hang-mismatch"]
    if differs is None:
        assert not found and "hang-mismatch" in [r.rule for r in result.ruled_out]
    else:
        assert found[0].evidence["differs_in"] == differs and found[0].evidence["seq"] == 2


def _order_job(tmp_path, gap: int):
    """Rank 0: all_reduce then broadcast; rank 1: broadcast, `gap` - 1 all_gathers, then all_reduce."""
    r0 = [("all_reduce", 8, "started"), ("broadcast", 4, "scheduled")] + [
        ("all_gather", 2, "scheduled")
    ] * (gap - 1)
    r1 = (
        [("broadcast", 4, "started")]
        + [("all_gather", 2, "scheduled")] * (gap - 1)
        + [("all_reduce", 8, "scheduled")]
    )
    return write_job(tmp_path, "2.10", {0: r0, 1: r1})


def test_a_swapped_pair_is_a_different_order(tmp_path):
    top = diagnosis(flight_recorder=[_order_job(tmp_path, 1)]).findings[0]
    assert top.rule == "hang-order"
    assert top.title == (
        "ranks 0 and 1 issue default_pg's collectives in a different order from #1: all_reduce then "
        "broadcast on rank 0, broadcast then all_reduce on rank 1"
    )


@pytest.mark.parametrize(
    "gap, rule", [(H.ORDER_WINDOW, "hang-order"), (H.ORDER_WINDOW + 1, "hang-mismatch")]
)
def test_the_swapped_call_is_searched_within_the_order_window(tmp_path, gap, rule):
    assert diagnosis(flight_recorder=[_order_job(tmp_path, gap)]).findings[0].rule == rule


def _p2p(version, rank, op, peer_text, numel, state, p2p_seq):
    return entry(
        version,
        rank,
        1,
        f"{op} {peer_text}",
        numel,
        state,
        is_p2p=True,
        p2p_seq_id=p2p_seq,
        collective_seq_id=1,
    )


@pytest.mark.parametrize("receiver_posts", [None, 64, 32])
def test_a_send_without_its_receive(tmp_path, receiver_posts):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(_p2p("2.10", 0, "send", "0->1", 64, "started", 1))
    if receiver_posts:
        docs[1]["entries"].append(_p2p("2.10", 1, "recv", "1<-0", receiver_posts, "started", 1))
    result = diagnosis(flight_recorder=_write(tmp_path, docs))
    found = [f for f in result.findings if f.rule == "hang-p2p"]
    if receiver_posts == 64:  # the healthy twin: both sides posted the same size
        assert not found
        return
    assert found[0].title.startswith(
        "rank 0's send to rank 1 (64 elements Float, p2p #1 of default_pg)"
    )
    assert (found[0].evidence["peer_op"], found[0].evidence["peer_numel"]) == (
        (None, None) if receiver_posts is None else ("recv", 32)
    )


def test_a_send_that_reads_completed_without_any_receive_is_still_unmatched(tmp_path):
    """NCCL marks work it aborted as completed (the H200 recording's JSON dump): pairing finds it."""
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(_p2p("2.10", 0, "send", "0->1", 64, "completed", 1))
    found = [
        f
        for f in diagnosis(flight_recorder=_write(tmp_path, docs)).findings
        if f.rule == "hang-p2p"
    ]
    assert found and "NCCL reports work the watchdog aborted as completed" in found[0].detail


def test_a_receive_without_its_send(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[1]["entries"].append(_p2p("2.10", 1, "recv", "1<-0", 64, "started", 1))
    found = [
        f
        for f in diagnosis(flight_recorder=_write(tmp_path, docs)).findings
        if f.rule == "hang-p2p"
    ]
    assert found[0].title.startswith("rank 1's recv from rank 0 (64 elements Float")


@pytest.mark.parametrize("sender_state, found", [("started", True), ("completed", False)])
def test_with_a_wrapped_buffer_only_pending_operations_are_paired(tmp_path, sender_state, found):
    """Rank 1's buffer dropped its oldest entries (first record id 7): its receives can no longer be
    counted, so a completed send is taken as paired, a pending one without a pending receive is not."""
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[1]["entries"][0]["record_id"] = 7
    docs[0]["entries"].append(_p2p("2.10", 0, "send", "0->1", 64, sender_state, 1))
    result = diagnosis(flight_recorder=_write(tmp_path, docs))
    assert bool([f for f in result.findings if f.rule == "hang-p2p"]) == found


def test_a_group_behind_another_groups_collective(tmp_path):
    """Both ranks are in default_pg #2 with the same call, each after an unfinished call of group 1
    (in which both are, too): default_pg waits behind group 1, which is the one to look at."""
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(entry("2.10", 0, 1, "all_reduce", 8, "started", group="1"))
    docs[1]["entries"].append(entry("2.10", 1, 1, "all_reduce", 8, "started", group="1"))
    for r in (0, 1):
        later = entry("2.10", r, 2, "all_reduce", 8, "scheduled")
        later["time_created_ns"] = T0 + 10**9
        docs[r]["entries"].append(later)
        docs[r]["pg_config"]["1"] = {"name": "1", "desc": "group_1", "ranks": "[0, 1]"}
    result = diagnosis(flight_recorder=_write(tmp_path, docs))
    assert rules(result) == ["hang-behind-group"]
    assert result.findings[0].title.startswith(
        "default_pg's collective #2 waits behind group_1's #1"
    )
    assert [f.rule for f in result.findings][1:] == ["hang-in-flight"]  # group 1: no timeout seen
    # the twin: issued the other way round, group 1's call is the one behind
    for r in (0, 1):
        docs[r]["entries"][-1]["time_created_ns"] = T0 - 1
    flipped = diagnosis(flight_recorder=_write(tmp_path, docs)).findings[0]
    assert flipped.title.startswith("group_1's collective #1 waits behind default_pg's #2")


@pytest.mark.parametrize(
    "evidence, rule, severity",
    [
        ("none", "hang-in-flight", "info"),
        ("log", "hang-agreed", "warning"),
        ("retired", "hang-agreed", "warning"),
    ],
)
def test_every_rank_in_one_collective_is_a_hang_only_with_evidence_of_one(
    tmp_path, evidence, rule, severity
):
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")])
        for r in (0, 1)
    }
    logs = []
    if evidence == "retired":  # NCCL's watchdog retired it without completion: it timed out
        docs[0]["entries"][1]["retired"] = True
    if evidence == "log":
        logs = [tmp_path / "job.log"]
        logs[0].write_text(WATCHDOG.format(rank=0, seq=2, done=1))
    result = diagnosis(flight_recorder=_write(tmp_path, docs), logs=logs)
    assert (result.findings[0].rule, result.findings[0].severity) == (rule, severity)


def test_the_ring_buffer_compares_only_what_every_rank_still_holds(tmp_path):
    """Rank 0's buffer kept #3 on, rank 1's #1 on: #1-#2 are not compared (a mismatch there is
    not reported), a rank missing at #5 is."""
    r0 = [("all_reduce", 8, "completed")] * 5
    r1 = [("all_reduce", 16, "completed")] * 2 + [("all_reduce", 8, "completed")] * 2
    docs = {0: dump("2.10", 0, r0), 1: dump("2.10", 1, r1)}
    docs[0]["entries"] = docs[0]["entries"][2:]
    docs[0]["entries"][-1]["state"] = "started"
    docs[0]["pg_status"]["0"]["last_completed_collective"] = 4
    result = diagnosis(flight_recorder=_write(tmp_path, docs))
    assert rules(result) == ["hang-missing-rank"] and result.findings[0].evidence["seq"] == 5
    assert any("before 3 are no longer in every rank's buffer" in n for n in result.notes)


def test_a_member_without_a_dump_is_not_checked_with_the_command_that_dumps_it(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")], world=3) for r in (0, 1)}
    result = diagnosis(flight_recorder=_write(tmp_path, docs))
    missing = [n for n in result.not_checked if n.rule == "hang-dumps"]
    assert missing and "ranks 2" in missing[0].hypothesis.replace("rank 2", "ranks 2")
    assert "TORCH_FR_BUFFER_SIZE=2000" in missing[0].next_command
    assert "hang-mismatch" not in [r.rule for r in result.ruled_out]  # not with a rank unseen


def test_the_reduction_is_always_said_to_be_unrecorded():
    result = diagnosis(flight_recorder=[GLOO / "healthy" / "dumps"])
    assert any("reduces with the same operation" in n.hypothesis for n in result.not_checked)


# ---- the job log alone, and beside the dumps -----------------------------------------------------

# the format of torch's watchdog lines (copied from public job logs; hand-written here)
WATCHDOG = (
    "[rank{rank}]:[E810 03:04:11.061727749 ProcessGroupNCCL.cpp:683] [Rank {rank}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
    "Timeout(ms)=600000) ran for 600096 milliseconds before timing out.\n"
    "[rank{rank}]:[E810 03:04:11.063313477 ProcessGroupNCCL.cpp:2241] [PG ID 0 PG GUID 0(default_pg) "
    "Rank {rank}]  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: "
    "{seq}, last completed work: {done}\n"
)
SILENT = "[rank{rank}]:[W810 03:00:00.000000000 Utils.hpp:137] Warning: something unrelated\n"


def _log(tmp_path, text):
    path = tmp_path / "job.log"
    path.write_text(text)
    return path


def test_a_log_alone_points_at_the_silent_rank_as_an_inference(tmp_path):
    text = (
        WATCHDOG.format(rank=0, seq=78, done=77)
        + WATCHDOG.format(rank=2, seq=78, done=77)
        + SILENT.format(rank=1)
    )
    result = diagnosis(logs=[_log(tmp_path, text)])
    top = result.findings[0]
    assert (top.rule, top.severity, top.confidence) == ("hang-watchdog", "error", "medium")
    assert top.evidence["timed_out_ranks"] == [0, 2] and top.evidence["silent_ranks"] == [1]
    assert top.evidence["last_enqueued"] == {"0": 78, "2": 78}
    asked = [n for n in result.not_checked if n.rule == "hang-dumps"]
    assert asked and "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in asked[0].next_command


def test_a_log_where_every_rank_timed_out_names_no_rank(tmp_path):
    text = WATCHDOG.format(rank=0, seq=5, done=4) + WATCHDOG.format(rank=1, seq=5, done=4)
    top = diagnosis(logs=[_log(tmp_path, text)]).findings[0]
    assert (top.rule, top.severity) == ("hang-watchdog", "warning") and "every rank" in top.title


def test_a_clean_log_alone_says_so_and_exits_0(tmp_path):
    result = run("--log", _log(tmp_path, SILENT.format(rank=0)))
    assert result.exit_code == 0 and "hang-log-clean" not in result.stdout  # titles, not rule ids
    assert "the log shows no watchdog timeout" in result.stdout


def test_the_logs_timeouts_and_launcher_verdict_are_notes_beside_the_dumps():
    result = diagnosis(
        flight_recorder=[GLOO / "skip" / "dumps"], logs=[GLOO / "skip" / "torchrun.log"]
    )
    assert "log: rank 0's gloo collective timed out after 5000 ms" in result.notes
    assert any(
        n.startswith("log: torchrun's first observed failure is rank 0 (exit code 1)")
        for n in result.notes
    )


def test_a_log_that_says_the_flight_recorder_was_off(tmp_path):
    text = WATCHDOG.format(rank=0, seq=3, done=2) + (
        "[rank0]:[E810 03:04:11.063347235 ProcessGroupNCCL.cpp:730] Stack trace of the failed collective not "
        "found, potentially because FlightRecorder is disabled. You can enable it by setting "
        "TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.\n"
    )
    asked = [
        n for n in diagnosis(logs=[_log(tmp_path, text)]).not_checked if n.rule == "hang-dumps"
    ]
    assert "the Flight Recorder was disabled on rank 0" in asked[0].missing


@pytest.mark.parametrize("kind", ["missing", "binary", "directory", "device"])
def test_a_log_that_cannot_be_read_is_one_line_exit_2(tmp_path, kind):
    """--log takes any text (walked here, not in test_trust_walk): unreadable files are refused."""
    path = {
        "missing": tmp_path / "absent.log",
        "binary": tmp_path / "b.log",
        "directory": tmp_path,
        "device": Path("/dev/zero"),
    }[kind]
    if kind == "binary":
        path.write_bytes(b"\x7fELF\x02\x01" + bytes(range(256)) * 8)
    result = run("--flight-recorder", GLOO / "skip" / "dumps", "--log", path)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("ncclprobe: error: ")


def test_nothing_readable_is_exit_3(tmp_path):
    """Dumps of a job that ran without the Flight Recorder (no entries, no status) and an empty log."""
    off = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}
    (tmp_path / "dumps").mkdir()
    for r in (0, 1):
        (tmp_path / "dumps" / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(off))
    empty = _log(tmp_path, "")
    result = run("--flight-recorder", tmp_path / "dumps", "--log", empty)
    assert result.exit_code == 3 and "the Flight Recorder dumps hold no collective" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert run("--log", empty).exit_code == 3


def test_collect_env_goes_with_a_hangs_evidence():
    path = next((FIXTURES / "collect_env").iterdir())
    result = run("--flight-recorder", GLOO / "skip" / "dumps", "--collect-env", path)
    assert result.exit_code == 1 and "rank 1 never entered collective 4" in result.stdout


# ---- NCCL logs -----------------------------------------------------------------------------------

UNKNOWN_TOKEN = NCCL_LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_unknown_token.log"
EXCL_LL = NCCL_LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"


def test_a_communicator_that_never_finished_init():
    """A real H200 log: NCCL_PROTO=LL,Bogus made communicator creation fail after Init START. The
    cause (the setting NCCL refuses, linted from what the rank's NCCL read) ranks before the symptom."""
    result = diagnosis(nccl_logs=[UNKNOWN_TOKEN])
    cause, symptom = result.findings[:2]
    assert cause.rule == "unsafe-settings" and "unknown token 'Bogus'" in cause.title
    assert symptom.rule == "nccl-init" and symptom.title == (
        "rank 0's NCCL communicator 0x947ec00 (2 ranks) never finished init"
    )
    warn = [f for f in result.findings if f.rule == "nccl-warn"][0]
    assert warn.evidence["times"] == ["2026-11-29 09:42:01"]


def test_init_that_completed_is_ruled_out():
    result = diagnosis(nccl_logs=[EXCL_LL])
    assert "nccl-init" in [r.rule for r in result.ruled_out] and "nccl-init" not in rules(result)


def test_settings_that_differ_between_ranks_and_their_twin(tmp_path):
    text = EXCL_LL.read_text()
    other = tmp_path / "rank1.log"
    other.write_text(
        text.replace(
            "NCCL_PROTO set by environment to", "NCCL_PROTO set by environment to Simple #"
        )
    )
    differ = [
        f
        for f in diagnosis(nccl_logs=[EXCL_LL, other]).findings
        if f.rule == "nccl-settings-differ"
    ]
    assert differ and differ[0].title.startswith(
        "NCCL read different settings on different ranks: NCCL_PROTO"
    )
    same = diagnosis(nccl_logs=[EXCL_LL, EXCL_LL])
    assert "nccl-settings-differ" in [r.rule for r in same.ruled_out]


@pytest.mark.parametrize(
    "offset_s, placed",
    [
        (-5, "5 s before the stuck collective was issued"),
        (3, "3 s after the stuck collective was issued, within its 10 s timeout"),
        (12, "12 s after the stuck collective was issued, after its 10 s timeout"),
    ],
)
def test_a_stamped_warn_is_placed_against_the_stuck_collective(tmp_path, offset_s, placed):
    import datetime

    calls = {
        0: [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")],
        1: [("all_reduce", 8, "completed")],
    }
    dumps = write_job(tmp_path / "d", "2.10", calls)
    issued = (
        T0 + 2 * 1_000_000
    )  # the stuck collective's time_created_ns on rank 0 (rank 0's offset 0)
    when = datetime.datetime.fromtimestamp(issued / 1e9 + offset_s, datetime.timezone.utc)
    log = tmp_path / "nccl.log"
    log.write_text(
        "vm:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
        f"[{when:%Y-%m-%d %H:%M:%S}] vm:1:2 [0] transport/net_socket.cc:1 NCCL WARN NET/Socket : peer closed\n"
    )
    warn = [
        f
        for f in diagnosis(flight_recorder=[dumps], nccl_logs=[log]).findings
        if f.rule == "nccl-warn"
    ][0]
    assert warn.evidence["relative_to_hang"] == [placed] and warn.confidence == "medium"


def test_a_file_without_nccl_lines_is_not_an_nccl_log(tmp_path):
    result = run("--nccl-log", _log(tmp_path, "hello\n"))
    assert result.exit_code == 2 and "no NCCL log lines" in result.stderr


# ---- helpers -------------------------------------------------------------------------------------


def _write(tmp_path, docs: dict) -> list:
    folder = tmp_path / "dumps"
    folder.mkdir(exist_ok=True)
    for rank, doc in docs.items():
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    return [folder]


def _read(doc, rank, folder: Path):
    """One rank's hand-written dump, written as torch names it and read by the public reader."""
    from ncclprobe.evidence.hang.flight_recorder import read_dump

    path = folder / f"nccl_trace_rank_{rank}"
    path.write_bytes(pickle.dumps(doc, protocol=2))
    return read_dump(path)


# ---- more twins and boundaries ----------------------------------------------------------------


def test_a_missing_rank_that_waits_in_an_agreed_collective_is_no_cycle(tmp_path):
    """The twin of the cycle: rank 1 is missing from group 1 #2 because it waits in default_pg #2,
    where every member is (no one missing there): the missing rank is named with where it waits."""
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    for r in (0, 1):
        docs[r]["pg_config"]["1"] = {"name": "1", "desc": "group_1", "ranks": "[0, 1]"}
        docs[r]["entries"].append(entry("2.10", r, 1, "all_reduce", 8, "completed", group="1"))
        docs[r]["entries"].append(entry("2.10", r, 2, "all_reduce", 8, "started"))
    docs[0]["entries"].append(entry("2.10", 0, 2, "all_reduce", 8, "started", group="1"))
    result = diagnosis(flight_recorder=_write(tmp_path, docs))
    assert "hang-groups" not in rules(result)
    missing = [f for f in result.findings if f.rule == "hang-missing-rank"][0]
    assert missing.evidence["missing_rank_state"]["1"]["waits_in"] == {"group": "0", "seq": 2}
    assert "it waits in default_pg's collective #2" in missing.detail


@pytest.mark.parametrize(
    "offset_s, placed",
    [
        (-1, "1 s before the stuck collective was issued"),
        (0, "0 s after the stuck collective was issued, within its 10 s timeout"),
        (10, "10 s after the stuck collective was issued, within its 10 s timeout"),
        (11, "11 s after the stuck collective was issued, after its 10 s timeout"),
    ],
)
def test_the_warn_placement_boundaries(tmp_path, offset_s, placed):
    test_a_stamped_warn_is_placed_against_the_stuck_collective(tmp_path, offset_s, placed)


def test_a_warn_after_the_timeout_is_informational_and_one_within_it_a_warning(tmp_path):
    import datetime

    calls = {
        0: [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")],
        1: [("all_reduce", 8, "completed")],
    }
    dumps = write_job(tmp_path / "d", "2.10", calls)
    issued = (T0 + 2 * 1_000_000) / 1e9
    for offset, severity in ((5, "warning"), (30, "info")):
        when = datetime.datetime.fromtimestamp(issued + offset, datetime.timezone.utc)
        log = tmp_path / f"nccl{offset}.log"
        log.write_text(
            "vm:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
            f"[{when:%Y-%m-%d %H:%M:%S}] vm:1:2 [0] net.cc:1 NCCL WARN NET/Socket : Connection reset by peer\n"
        )
        warn = [
            f
            for f in diagnosis(flight_recorder=[dumps], nccl_logs=[log]).findings
            if f.rule == "nccl-warn"
        ][0]
        assert warn.severity == severity, offset


def test_the_newest_known_version_reads_without_a_note(tmp_path):
    calls = {r: [("all_reduce", 8, "completed")] for r in (0, 1)}
    result = diagnosis(flight_recorder=[write_job(tmp_path, "2.10", calls)])
    assert not any("newer than" in n for n in result.notes)


def test_a_hang_with_an_env_check_of_the_live_job(tmp_path):
    """Combined with a real env-check document: its finding (a worker lacks what its siblings have)
    and the hang's stand side by side."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    from tests.test_diagnose import LAUNCHER

    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "NCCL_PROTO"},
    )
    try:
        launcher.stdout.readline()
        while len(psutil.Process(launcher.pid).children()) < 3:
            time.sleep(0.05)
        out = CliRunner().invoke(
            cli,
            [
                "env-check",
                "--pid",
                str(launcher.pid),
                "--expect",
                "NCCL_PROTO=LL",
                "--format",
                "json",
            ],
        )
    finally:
        for child in psutil.Process(launcher.pid).children():
            child.kill()
        launcher.kill()
        launcher.wait()
    doc = tmp_path / "env.json"
    doc.write_text(out.stdout)
    result = diagnosis(flight_recorder=[GLOO / "skip" / "dumps"], env_check=doc)
    found = rules(result)
    assert "env-check-sibling" in found and "hang-missing-rank" in found
