"""What each hang finding says, field by field, and the branches the first mutation run of
diagnose/hang*.py (mutmut 3.8.1, docs/LOG.md) found unpinned: group memberships, what counts as
finished, where a missing rank waits, the log-only wording, the pickle checker's labels. Dumps are
hand-written (tests/flight_recorder_dumps.py) unless a recorded one is named."""

import pickle
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.hang import hang as H
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.hang.flight_recorder import read_flight_recorder
from ncclprobe.evidence.hang.safe_pickle import loads_data
from tests.flight_recorder_dumps import T0, dump, entry

RECORDED = Path(__file__).parent / "fixtures" / "flight_recorder"


def _write(tmp_path, docs: dict) -> Path:
    folder = tmp_path / "dumps"
    folder.mkdir(parents=True, exist_ok=True)
    for rank, doc in docs.items():
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    return folder


def _diagnose(tmp_path, docs, **kwargs):
    return diagnose(load_evidence(flight_recorder=[_write(tmp_path, docs)], **kwargs))


def _find(result, rule):
    return [f for f in result.findings if f.rule == rule]


def _log(tmp_path, text, name="job.log"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- memberships and completion ---------------------------------------------------------------


def test_recorded_memberships_are_taken_and_said_recorded(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")], world=3) for r in (0, 1)}
    group = H.build(read_flight_recorder([_write(tmp_path, docs)])).groups["0"]
    assert (group.members, group.members_recorded, group.dumped) == ((0, 1, 2), True, (0, 1))


@pytest.mark.parametrize(
    "name, desc, members",
    [("0", "undefined", (0, 1, 2)), ("5", "default_pg", (0, 1, 2)), ("5", "tp", (0, 1))],
)
def test_an_unrecorded_group_is_the_world_when_default_else_the_ranks_that_mention_it(
    tmp_path, name, desc, members
):
    """The default group (named "0" or described default_pg) spans every rank dumped; another
    group only the ranks whose dumps mention it (rank 2 issued nothing in it)."""
    docs = {}
    for r in (0, 1, 2):
        doc = dump("2.10", r, [("all_reduce", 8, "completed")])
        doc["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[]"}}  # gloo's, torch 2.13
        if r < 2:
            e = entry("2.10", r, 1, "all_reduce", 8, "completed", group="0")
            e["process_group"], e["pg_id"] = (name, desc), 7
            doc["entries"] = [e]
        docs[r] = doc
    hang = H.build(read_flight_recorder([_write(tmp_path, docs)]))
    assert hang.groups[name].members == members and not hang.groups[name].members_recorded
    how = "every rank dumped" if members == (0, 1, 2) else "the dumps that mention it"
    assert any(how in n for n in hang.notes)


def test_a_member_that_issued_nothing_in_the_group_is_missing_at_its_first_collective(tmp_path):
    """Version 1.4 has no pg_status: a rank whose dump holds nothing of the group never enqueued #1."""
    docs = {0: dump("1.4", 0, [("all_reduce", 8, "started")]), 1: dump("1.4", 1, [])}
    docs[1]["pg_config"] = docs[0]["pg_config"]
    top = _diagnose(tmp_path, docs).findings[0]
    assert (top.rule, top.evidence["missing_ranks"], top.evidence["seq"]) == (
        "hang-missing-rank",
        [1],
        1,
    )
    assert "its last collective in group 0 is none recorded" in top.detail  # 1.x: no description


def test_a_rank_that_enqueued_the_seq_but_lost_its_entry_is_not_missing(tmp_path):
    """pg_status says rank 1 enqueued #2 although its buffer no longer holds it: unknown, not missing."""
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")])
        for r in (0, 1)
    }
    docs[1]["entries"] = docs[1]["entries"][:1]
    docs[1]["pg_status"]["0"]["last_enqueued_collective"] = 2
    assert _find(_diagnose(tmp_path, docs), "hang-missing-rank") == []


def _waiting_rank(tmp_path, other_states: tuple[str, str], other_sizes=(8, 8)):
    """Rank 1 never enters default_pg #2; in group 1 both ranks issued #1 in the given states."""
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(entry("2.10", 0, 2, "all_reduce", 8, "started"))
    for r in (0, 1):
        docs[r]["pg_config"]["1"] = {"name": "1", "desc": "group_1", "ranks": "[0, 1]"}
        docs[r]["entries"].append(
            entry("2.10", r, 1, "all_reduce", other_sizes[r], other_states[r], group="1")
        )
    return [f for f in _diagnose(tmp_path, docs).findings if f.rule == "hang-missing-rank"][0]


def test_a_missing_rank_waits_in_another_groups_unfinished_collective(tmp_path):
    found = _waiting_rank(tmp_path, ("started", "started"))
    assert found.evidence["missing_rank_state"] == {
        "1": {"last_completed": 1, "waits_in": {"group": "1", "seq": 1}}
    }


def test_a_collective_a_peer_finished_with_every_member_in_it_is_not_where_the_rank_waits(tmp_path):
    found = _waiting_rank(tmp_path, ("completed", "started"))
    assert found.evidence["missing_rank_state"]["1"]["waits_in"] is None


def test_a_collective_finished_on_one_rank_with_another_call_there_is_still_pending(tmp_path):
    found = _waiting_rank(tmp_path, ("completed", "started"), other_sizes=(8, 16))
    assert found.evidence["missing_rank_state"]["1"]["waits_in"] == {"group": "1", "seq": 1}


def test_the_oldest_pending_call_is_where_a_rank_waits(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(entry("2.10", 0, 2, "all_reduce", 8, "started"))
    for r in (0, 1):
        for g in ("1", "2"):
            docs[r]["pg_config"][g] = {"name": g, "desc": f"group_{g}", "ranks": "[0, 1]"}
    newer = entry("2.10", 1, 1, "all_reduce", 8, "started", group="1")
    older = entry("2.10", 1, 1, "all_reduce", 8, "started", group="2")
    newer["time_created_ns"], older["time_created_ns"] = T0 + 50, T0 + 10
    docs[1]["entries"] += [newer, older]
    docs[0]["entries"] += [
        entry("2.10", 0, 1, "all_reduce", 8, "started", group=g) for g in ("1", "2")
    ]
    found = _find(_diagnose(tmp_path, docs), "hang-missing-rank")[0]
    assert found.evidence["missing_rank_state"]["1"]["waits_in"] == {"group": "2", "seq": 1}


def test_the_group_summary_of_the_recorded_groups_job():
    summary = {
        g["label"]: g
        for g in H.groups_summary(read_flight_recorder([RECORDED / "nccl" / "groups" / "dumps"]))
    }
    assert summary["group_a"]["ranks"] == {
        "0": {"enqueued": 2, "completed": 1},
        "1": {"enqueued": 1, "completed": 1},
    }
    assert (summary["group_a"]["stuck_at"], summary["group_a"]["stuck_because"]) == (2, "missing")
    assert (summary["default_pg"]["stuck_at"], summary["default_pg"]["stuck_because"]) == (
        None,
        None,
    )
    order = {
        g["label"]: g
        for g in H.groups_summary(read_flight_recorder([RECORDED / "nccl" / "order" / "dumps"]))
    }
    assert order["default_pg"]["stuck_because"] == "mismatch"


# ---- the findings' words -----------------------------------------------------------------------


def test_in_flight_and_agreed_say_the_same_call():
    result = diagnose(load_evidence(flight_recorder=[RECORDED / "gloo" / "healthy" / "dumps"]))
    (f,) = result.findings
    assert f.title == (
        "every member of default_pg is in collective #6 (all_reduce of [1048576] Float) with the same call, "
        "and none finished it: it was in flight when the dumps were taken"
    )
    assert f.evidence == {"group": "0", "group_desc": "default_pg", "seq": 6, "op": "all_reduce"}
    assert "no log shows a timeout or a failure" in f.detail


def test_agreed_with_a_timeout_points_below_the_collectives(tmp_path):
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")])
        for r in (0, 1)
    }
    log = _log(
        tmp_path,
        "[rank0]: RuntimeError: [x] Timed out waiting 5000ms for recv operation to complete\n",
    )
    result = _diagnose(tmp_path, docs, logs=[log])
    (f,) = _find(result, "hang-agreed")
    assert f.title.endswith("with the same call, and none finished it")
    assert "The cause is below the collectives" in f.detail and f.evidence["seq"] == 2
    asked = [n for n in result.not_checked if n.rule == "nccl-log"]
    assert asked and "--nccl-log /tmp/fr/nccl.*.log" in asked[0].next_command


def test_no_nccl_log_is_asked_for_when_every_collective_is_accounted_for():
    result = diagnose(load_evidence(flight_recorder=[RECORDED / "gloo" / "skip" / "dumps"]))
    assert not [n for n in result.not_checked if n.rule == "nccl-log"]


def test_behind_group_evidence_names_each_ranks_older_call(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    for r in (0, 1):
        docs[r]["pg_config"]["1"] = {"name": "1", "desc": "group_1", "ranks": "[0, 1]"}
        docs[r]["entries"].append(entry("2.10", r, 1, "all_reduce", 8, "started", group="1"))
        later = entry("2.10", r, 2, "all_reduce", 8, "scheduled")
        later["time_created_ns"] = T0 + 10**9
        docs[r]["entries"].append(later)
    (f,) = _find(_diagnose(tmp_path, docs), "hang-behind-group")
    assert f.evidence["behind"] == {"0": ["1", 1], "1": ["1", 1]}
    assert (
        "rank 0: group_1 #1; rank 1: group_1 #1" in f.detail and "look at group_1 first" in f.detail
    )


def test_a_call_issued_at_the_same_moment_is_not_behind(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    for r in (0, 1):
        docs[r]["pg_config"]["1"] = {"name": "1", "desc": "group_1", "ranks": "[0, 1]"}
        a = entry("2.10", r, 1, "all_reduce", 8, "started", group="1")
        b = entry("2.10", r, 2, "all_reduce", 8, "scheduled")
        a["time_created_ns"] = b["time_created_ns"] = T0 + 10**9
        docs[r]["entries"] += [a, b]
    assert not _find(_diagnose(tmp_path, docs), "hang-behind-group")


def test_all_done_counts_the_calls_and_names_the_groups():
    (f,) = diagnose(
        load_evidence(flight_recorder=[RECORDED / "nccl" / "healthy" / "dumps"])
    ).findings
    assert (
        f.title
        == "every rank completed every collective its dump records (12 calls over default_pg)"
    )
    assert (
        f.evidence == {"calls": 12, "ranks": [0, 1]}
        and "no collective or p2p operation is stuck" in f.detail
    )


def test_all_done_with_a_hang_in_the_log(tmp_path):
    log = _log(
        tmp_path,
        "[rank1]: RuntimeError: [x] Timed out waiting 5000ms for recv operation to complete\n",
    )
    result = diagnose(
        load_evidence(flight_recorder=[RECORDED / "nccl" / "healthy" / "dumps"], logs=[log])
    )
    f = result.findings[0]
    assert f.title.endswith("(12 calls over default_pg): the hang is elsewhere")
    assert "waited outside these groups" in f.detail and f.evidence["calls"] == 12


def test_the_coverage_words(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")], world=3) for r in (0, 1)}
    result = _diagnose(tmp_path, docs)
    (dumps,) = [n for n in result.not_checked if n.rule == "hang-dumps"]
    assert dumps.hypothesis == "what ranks 2 were doing"
    assert dumps.missing == "their Flight Recorder dumps (dumps read: ranks 0, 1)"
    (reduction,) = [n for n in result.not_checked if n.rule == "hang-mismatch"]
    assert reduction.missing == "the reduction: the Flight Recorder does not record it"
    full = diagnose(load_evidence(flight_recorder=[RECORDED / "nccl" / "healthy" / "dumps"]))
    (ruled,) = [r for r in full.ruled_out if r.rule == "hang-mismatch"]
    assert ruled.hypothesis == "ranks issued different collectives at one sequence number"
    assert ruled.reason.endswith("on every rank that issued it (12 calls)")


def test_dumps_without_entries_ask_for_the_flight_recorder(tmp_path):
    off = {
        "version": "2.10",
        "pg_config": {},
        "pg_status": {"0": {"last_enqueued_collective": 3}},
        "entries": [],
    }
    result = _diagnose(tmp_path, {0: off, 1: off})
    (n,) = result.not_checked
    assert (
        n.rule == "hang-dumps"
        and "the 2 dump(s) hold none" in n.missing
        and "TORCH_FR_BUFFER_SIZE" in n.next_command
    )
    assert result.findings == []


def test_order_and_cycle_details():
    order = diagnose(
        load_evidence(flight_recorder=[RECORDED / "nccl" / "order" / "dumps"])
    ).findings[0]
    assert "rank 1 issues rank 0's call later, at #5" in order.detail
    assert (
        "the results are wrong (no error is raised for this). Issue them in one order"
        in order.detail
    )
    assert set(order.evidence["calls"]) == {"0", "1"}
    cycle = diagnose(
        load_evidence(flight_recorder=[RECORDED / "nccl" / "groups" / "dumps"])
    ).findings[0]
    assert cycle.detail.startswith(
        "Each of these collectives misses a rank that is itself waiting in the next one"
    )


def test_a_mismatch_gloo_marked_completed_and_one_nccl_left_open(tmp_path):
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8 * (r + 1), "started")])
        for r in (0, 1)
    }
    docs[0]["entries"][1]["state"] = "completed"
    (f,) = _find(_diagnose(tmp_path, docs), "hang-mismatch")
    assert f.detail.endswith("(completed on rank 0 only).")
    docs[0]["entries"][1]["state"] = "started"
    (g,) = _find(_diagnose(tmp_path / "b", docs), "hang-mismatch")
    assert g.detail.endswith(": none of them completed it.")


# ---- p2p words --------------------------------------------------------------------------------


def _p2p(rank, op, peer_text, numel, state, seq=1):
    return entry(
        "2.10",
        rank,
        1,
        f"{op} {peer_text}",
        numel,
        state,
        is_p2p=True,
        p2p_seq_id=seq,
        collective_seq_id=1,
    )


def test_a_send_whose_peer_waits_elsewhere(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(_p2p(0, "send", "0->1", 64, "started"))
    for r in (0, 1):
        docs[r]["pg_config"]["1"] = {"name": "1", "desc": "group_1", "ranks": "[0, 1]"}
    docs[1]["entries"].append(entry("2.10", 1, 1, "all_reduce", 8, "started", group="1"))
    (f,) = _find(_diagnose(tmp_path, docs), "hang-p2p")
    assert (
        "rank 1 has no receive from rank 0 for it; it waits in group_1 #1 (all_reduce)" in f.detail
    )
    assert "reads completed" not in f.detail and f.evidence["state"] == "started"


def test_a_receive_of_another_size(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(_p2p(0, "send", "0->1", 64, "started"))
    docs[1]["entries"].append(_p2p(1, "recv", "1<-0", 32, "started"))
    (f,) = _find(_diagnose(tmp_path, docs), "hang-p2p")
    assert "rank 1's recv at the same place is of another size (32 elements)" in f.detail
    assert (f.evidence["peer_op"], f.evidence["peer_numel"], f.evidence["numel"]) == (
        "recv",
        32,
        64,
    )


def test_p2p_of_a_rank_without_a_dump_is_not_paired(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")], world=3) for r in (0, 1)}
    docs[0]["entries"].append(_p2p(0, "send", "0->2", 64, "started"))
    assert not _find(_diagnose(tmp_path, docs), "hang-p2p")


def test_a_pending_send_with_a_wrapped_buffer_and_a_pending_receive_of_its_size_is_paired(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[1]["entries"][0]["record_id"] = 7
    docs[0]["entries"].append(_p2p(0, "send", "0->1", 64, "started"))
    docs[1]["entries"].append(_p2p(1, "recv", "1<-0", 64, "started"))
    assert not _find(_diagnose(tmp_path, docs), "hang-p2p")
    docs[1]["entries"][-1]["input_sizes"] = docs[1]["entries"][-1]["output_sizes"] = [[32]]
    assert _find(_diagnose(tmp_path / "b", docs), "hang-p2p")


def test_a_completed_pair_with_an_open_one_after_it_is_pending_not_done(tmp_path):
    """Every p2p op paired, one still open on both sides: no p2p finding and no `all done` either."""
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(_p2p(0, "send", "0->1", 64, "started"))
    docs[1]["entries"].append(_p2p(1, "recv", "1<-0", 64, "started"))
    result = _diagnose(tmp_path, docs)
    assert not _find(result, "hang-p2p") and not _find(result, "hang-none-pending")


# ---- the log alone ----------------------------------------------------------------------------

WATCHDOG = (
    "[rank{r}]:[E1201 19:42:17.779 ProcessGroupNCCL.cpp:689] {prefix} Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) "
    "ran for 10099 milliseconds before timing out.\n"
)
STATUS = (
    "[rank{r}]:[E1201 19:42:17.780 ProcessGroupNCCL.cpp:2303] [PG ID {g} PG GUID {g}(default_pg) Rank {r}]  "
    "failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last "
    "completed work: {done}\n"
)
SIGNALLED = (
    "[rank{r}]:[E1201 19:42:23.058 ProcessGroupNCCL.cpp:1914] [PG ID {g} PG GUID {g}(default_pg) Rank {r}] "
    "Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug "
    "info. Last enqueued NCCL work: {enq}, last completed NCCL work: {enq}.\n"
)


def _log_only(tmp_path, text, **kwargs):
    return diagnose(load_evidence(logs=[_log(tmp_path, text)], **kwargs))


def test_the_read_finding_says_what_the_silent_ranks_log_said(tmp_path):
    text = WATCHDOG.format(r=0, prefix="[Rank 0]", seq=4) + STATUS.format(r=0, g=0, seq=4, done=3)
    text += SIGNALLED.format(r=1, g=0, enq=3)
    f = _log_only(tmp_path, text).findings[0]
    assert (
        f.title
        == "rank 1 never entered ALLREDUCE #4 of default_pg (1,048,576 elements) that rank 0 timed out in"
    )
    assert (
        "rank 1's log says its last enqueued work is 3" in f.detail
        and "it never enqueued #4" in f.detail
    )
    assert f.evidence["silent_last_enqueued"] == {"1": 3} and f.evidence["ran_ms"] == {"0": 10099}


@pytest.mark.parametrize("enqueued, confidence", [(3, "high"), (4, "medium")])
def test_a_silent_rank_is_behind_only_below_the_timed_out_seq(tmp_path, enqueued, confidence):
    text = WATCHDOG.format(r=0, prefix="[Rank 0]", seq=4) + STATUS.format(r=0, g=0, seq=4, done=3)
    text += SIGNALLED.format(r=1, g=0, enq=enqueued)
    assert _log_only(tmp_path, text).findings[0].confidence == confidence


def test_a_silent_ranks_status_of_another_group_does_not_count(tmp_path):
    text = WATCHDOG.format(r=0, prefix="[Rank 0]", seq=4) + STATUS.format(r=0, g=0, seq=4, done=3)
    text += SIGNALLED.format(r=1, g=5, enq=1)
    f = _log_only(tmp_path, text).findings[0]
    assert (f.confidence, f.evidence["silent_last_enqueued"]) == ("medium", {})
    assert f.title == (
        "rank 0 timed out in ALLREDUCE #4 of default_pg (1,048,576 elements); rank 1 logged no timeout: "
        "it likely never entered it"
    )
    assert "probably never enqueued it (inferred" in f.detail


def test_the_status_of_the_timed_out_seq_is_evidence_and_others_are_not(tmp_path):
    text = WATCHDOG.format(r=0, prefix="[PG ID 0 PG GUID 0(default_pg) Rank 0]", seq=4)
    text += STATUS.format(r=0, g=0, seq=4, done=3) + STATUS.format(r=0, g=0, seq=9, done=8)
    text += SIGNALLED.format(r=1, g=0, enq=3)
    f = _log_only(tmp_path, text).findings[0]
    assert (f.evidence["last_enqueued"], f.evidence["last_completed"]) == ({"0": 4}, {"0": 3})


@pytest.mark.parametrize(
    "prefix, label",
    [("[PG ID 3 PG GUID 3 Rank 0]", "PG 3"), ("[Rank 0]", "its group")],
)
def test_a_group_without_a_description_is_named_by_its_id(tmp_path, prefix, label):
    text = WATCHDOG.format(r=0, prefix=prefix, seq=4) + WATCHDOG.format(
        r=1, prefix=prefix.replace("0]", "1]"), seq=4
    )
    f = _log_only(tmp_path, text).findings[0]
    assert (
        f.title
        == f"every rank in the log timed out in ALLREDUCE #4 of {label} (1,048,576 elements), the same "
        "call on each"
    )
    assert "Ranks 0, 1 timed out in the same collective" in f.detail


def test_timeouts_are_reported_in_sequence_order(tmp_path):
    text = WATCHDOG.format(r=0, prefix="[PG ID 1 PG GUID 1(a) Rank 0]", seq=9)
    text += WATCHDOG.format(r=0, prefix="[PG ID 2 PG GUID 2(b) Rank 0]", seq=2)
    assert [f.evidence["seq"] for f in _log_only(tmp_path, text).findings] == [2, 9]


def test_a_gloo_log_alone(tmp_path):
    result = diagnose(load_evidence(logs=[RECORDED / "gloo" / "skip" / "torchrun.log"]))
    f = result.findings[0]
    assert f.title == "gloo timed out on rank 0 after 5000 ms waiting for a peer"
    assert (f.rule, f.severity, f.confidence, f.evidence) == (
        "hang-watchdog",
        "warning",
        "low",
        {"gloo_timeout_ms": {"0": 5000}},
    )
    assert "names neither the collective nor its sequence number" in f.detail


def test_a_clean_log_alone(tmp_path):
    result = _log_only(tmp_path, "[rank0]: hello\n[rank1]: hello\n")
    (f,) = result.findings
    assert (f.rule, f.severity, f.evidence) == ("hang-log-clean", "info", {"lines": 2})
    assert f.detail == "Read 2 lines; none says the job hung."
    (n,) = result.not_checked
    assert n.hypothesis == "which rank did not enter the collective, and what each rank last did"
    assert n.missing == "the ranks' Flight Recorder dumps (--flight-recorder)"
    assert "--nccl-log" in n.next_command


def test_the_dumps_command_asks_for_nccl_logs_only_when_none_were_given(tmp_path):
    nccl = (
        Path(__file__).parent
        / "fixtures"
        / "nccl_logs"
        / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"
    )
    result = _log_only(tmp_path, "[rank0]: hello\n", nccl_logs=[nccl])
    (n,) = [n for n in result.not_checked if n.rule == "hang-dumps"]
    assert "--nccl-log" not in n.next_command


def test_log_notes_name_group_and_launcher():
    result = diagnose(load_evidence(logs=[RECORDED / "nccl" / "skip" / "torchrun.log"]))
    assert result.notes[0] == (
        "log: the watchdog of rank 0 timed out in ALLREDUCE #4 (PG 0, default_pg) after 10099 ms (timeout 10000 ms)"
    )


# ---- the pickle checker ------------------------------------------------------------------------


def test_every_pickle_refusal_names_its_label():
    for data in (
        b"\x80\x02cos\nsystem\n.",
        b"\x80\x02]h\x05.",
        b"\x80\x02]",
        b"\x80\x02\x82\xf1.",  # EXT1 of a code nobody registered
    ):
        with pytest.raises(UsageProblem, match="^dump-7[: ]"):
            loads_data(data, "dump-7")


def test_a_memo_reference_never_stored_is_not_a_readable_pickle():
    """BINGET 5 decodes (the opcode walk passes) but its memo slot was never filled."""
    with pytest.raises(UsageProblem, match="not a readable pickle"):
        loads_data(b"\x80\x02]h\x05a.", "x")


def test_agreed_without_every_members_dump_says_so(tmp_path):
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")], world=3)
        for r in (0, 1)
    }
    (f,) = _find(_diagnose(tmp_path, docs), "hang-in-flight")
    assert f.title.startswith(
        "every dumped member of default_pg (ranks 0, 1; no dump of rank 2) is in collective #2"
    )


# ---- the second mutation run's survivors ------------------------------------------------------


def test_a_subgroup_that_leaves_a_rank_out_does_not_hide_that_ranks_default_group(tmp_path):
    """Rank 2 is no member of group 1 (ranks 0, 1), which the dumps list first: healthy, nothing above info."""
    docs = {}
    for r in (0, 1, 2):
        doc = dump("2.10", r, [("all_reduce", 8, "completed")], world=3)
        doc["pg_config"]["1"] = {"name": "1", "desc": "group_1", "ranks": "[0, 1]"}
        if r < 2:
            doc["entries"].insert(0, entry("2.10", r, 1, "all_reduce", 4, "completed", group="1"))
        docs[r] = doc
    result = _diagnose(tmp_path, docs)
    assert [f.rule for f in result.findings] == ["hang-none-pending"]
    summary = {g["label"]: g for g in H.groups_summary(read_flight_recorder([tmp_path / "dumps"]))}
    assert list(summary["default_pg"]["ranks"]) == ["0", "1", "2"]
    assert list(summary["group_1"]["ranks"]) == ["0", "1"]


@pytest.mark.parametrize(
    "firsts, noted", [((1, 1), False), ((3, 3), False), ((2, 1), True), ((3, 1), True)]
)
def test_the_ring_note_only_when_a_rank_holds_what_another_lost(tmp_path, firsts, noted):
    docs = {}
    for r, first in zip((0, 1), firsts):
        doc = dump("2.10", r, [("all_reduce", 8, "completed")] * 4)
        doc["entries"] = doc["entries"][first - 1 :]
        docs[r] = doc
    result = _diagnose(tmp_path, docs)
    assert any("no longer in every rank's buffer" in n for n in result.notes) == noted


def test_the_inferred_membership_note_names_the_ranks():
    result = diagnose(load_evidence(flight_recorder=[RECORDED / "gloo" / "skip" / "dumps"]))
    assert (
        "default_pg: the dumps do not record its ranks; taken as ranks 0, 1 (every rank dumped)"
        in result.notes
    )


def test_a_healthy_summary_says_agreed_when_the_dump_caught_a_call_in_flight():
    (g,) = H.groups_summary(read_flight_recorder([RECORDED / "gloo" / "healthy" / "dumps"]))
    assert (g["stuck_at"], g["stuck_because"]) == (6, "agreed")


def test_p2p_records_that_cannot_be_paired_are_skipped_not_fatal(tmp_path):
    """A coalesced marker first, a peer number past the group, a receive from a rank without a dump:
    the send after them is still paired (and found unmatched)."""
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")], world=3) for r in (0, 1)}
    marker = _p2p(0, "coalesced", "", 0, "completed")
    marker["profiling_name"] = "nccl:coalesced"
    docs[0]["entries"] += [
        marker,
        _p2p(0, "send", "0->3", 8, "started"),
        _p2p(0, "send", "0->1", 64, "started"),
    ]
    docs[1]["entries"].append(_p2p(1, "recv", "1<-2", 8, "started"))
    found = _find(_diagnose(tmp_path, docs), "hang-p2p")
    assert [(f.evidence["rank"], f.evidence["peer"], f.evidence["numel"]) for f in found] == [
        (0, 1, 64)
    ]


def test_a_receive_without_its_send_asks_for_a_send(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[1]["entries"].append(_p2p(1, "recv", "1<-0", 64, "started"))
    (f,) = _find(_diagnose(tmp_path, docs), "hang-p2p")
    assert f.title.endswith("has no matching send on rank 0")
    assert "rank 0 has no send to rank 1 for it" in f.detail


def test_an_unmatched_send_marked_completed_is_not_all_done(tmp_path):
    docs = {r: dump("2.10", r, [("all_reduce", 8, "completed")]) for r in (0, 1)}
    docs[0]["entries"].append(_p2p(0, "send", "0->1", 64, "completed"))
    result = _diagnose(tmp_path, docs)
    assert _find(result, "hang-p2p") and not _find(result, "hang-none-pending")


def test_a_failure_summary_alone_is_no_clean_log(tmp_path):
    text = "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 4)\n"
    result = _log_only(tmp_path, text)
    assert not [f for f in result.findings if f.rule == "hang-log-clean"]


def test_an_older_status_line_without_a_group_counts_for_the_timeout(tmp_path):
    text = (
        WATCHDOG.format(r=0, prefix="[PG ID 0 PG GUID 0(default_pg) Rank 0]", seq=4)
        + (
            "[rank0]:[E ProcessGroupNCCL.cpp:1] [Rank 0] Timeout at NCCL work: 4, last enqueued NCCL work: 4, "
            "last completed NCCL work: 3.\n"
        )
        + SIGNALLED.format(r=1, g=0, enq=3)
    )
    f = _log_only(tmp_path, text).findings[0]
    assert (f.evidence["last_enqueued"], f.evidence["last_completed"]) == ({"0": 4}, {"0": 3})


def test_a_timeout_line_without_sizes(tmp_path):
    text = (
        "[rank0]: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE) "
        "ran for 10 milliseconds before timing out.\n[rank1]: [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE) ran for 10 milliseconds before timing out.\n"
    )
    f = _log_only(tmp_path, text).findings[0]
    assert f.title == (
        "every rank in the log timed out in ALLREDUCE #4 of its group (? elements), the same call on each"
    )
    assert f.evidence["timed_out_ranks"] == [0, 1] and f.evidence["silent_ranks"] == []


def test_a_rank_known_only_from_torchruns_summary_is_a_silent_rank(tmp_path):
    text = WATCHDOG.format(r=0, prefix="[Rank 0]", seq=4) + (
        "Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -15 (pid: 9)\n"
        "  traceback : Signal 15 (SIGTERM) received by PID 9\n"
    )
    f = _log_only(tmp_path, text).findings[0]
    assert f.evidence["silent_ranks"] == [1]


def test_the_launchers_note_names_the_signal_or_the_exit_code():
    nccl = diagnose(load_evidence(logs=[RECORDED / "nccl" / "skip" / "torchrun.log"]))
    assert any("first observed failure is rank 0 (signal SIGABRT)" in n for n in nccl.notes)
    gloo = diagnose(load_evidence(logs=[RECORDED / "gloo" / "skip" / "torchrun.log"]))
    assert any("first observed failure is rank 0 (exit code 1)" in n for n in gloo.notes)
    assert sum("first observed failure" in n for n in gloo.notes) == 1


def test_the_not_checked_words(tmp_path):
    off = {
        "version": "2.10",
        "pg_config": {},
        "pg_status": {"0": {"last_enqueued_collective": 3}},
        "entries": [],
    }
    (n,) = _diagnose(tmp_path, {0: off}).not_checked
    assert n.hypothesis == "which collective each rank was in"
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8, "started")])
        for r in (0, 1)
    }
    log = _log(
        tmp_path,
        "[rank0]: RuntimeError: [x] Timed out waiting 5000ms for recv operation to complete\n",
    )
    (asked,) = [
        n for n in _diagnose(tmp_path / "b", docs, logs=[log]).not_checked if n.rule == "nccl-log"
    ]
    assert (asked.hypothesis, asked.missing) == (
        "NCCL's transport failed below the collectives",
        "the ranks' NCCL logs (--nccl-log)",
    )


def test_every_rank_timed_out_carries_its_evidence(tmp_path):
    text = WATCHDOG.format(r=0, prefix="[Rank 0]", seq=4) + WATCHDOG.format(
        r=1, prefix="[Rank 1]", seq=4
    )
    f = _log_only(tmp_path, text).findings[0]
    assert (f.evidence["seq"], f.evidence["op"], f.evidence["timeout_ms"]) == (
        4,
        "ALLREDUCE",
        10000,
    )
