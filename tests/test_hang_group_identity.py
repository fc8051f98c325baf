"""Which group an entry belongs to (diagnose/hang/hang_groups.py, hang_detail.py): the name where it
identifies a group, with the recorded members where one name spans disjoint groups, with the pg_id
where one process records several backends under one name (TORCH_DISTRIBUTED_DEBUG=DETAIL names
none of them); and DETAIL's own check backend, whose check that ran without its collective is a
mismatch. The recorded DETAIL jobs are tests/fixtures/flight_recorder/gloo3-detail (real); the
variants below are HAND-WRITTEN dumps (tests/flight_recorder_dumps.py), each with its healthy twin."""

import pickle

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.hang import hang as H
from ncclprobe.evidence.hang.flight_recorder import read_flight_recorder
from tests.flight_recorder_dumps import dump, entry
from tests.test_hang_log_agrees import RECORDED


def _write(tmp_path, docs: dict):
    folder = tmp_path / "dumps"
    folder.mkdir(parents=True, exist_ok=True)
    for rank, doc in docs.items():
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    return read_flight_recorder([folder])


def _stuck(dumps) -> set[tuple]:
    return {(s.group.name, s.because, s.seq, s.missing) for s in H.build(dumps).stuck}


# ---- one name, disjoint members: the members each rank's pg_config records -----------------------


def _split(tmp_path, late_rank_enters: bool):
    """Ranks 0-1 and 2-3 each form a group both named "5" (pg_config records each side's ranks);
    rank 1 never enters its group's #2 unless told to."""
    docs = {}
    for r in range(4):
        doc = dump("2.10", r, [("all_reduce", 8, "completed")], world=4)
        side = "[0, 1]" if r < 2 else "[2, 3]"
        doc["pg_config"]["5"] = {"name": "5", "desc": "group_5", "ranks": side}
        calls = 2 if (r != 1 or late_rank_enters) else 1
        for seq in range(1, calls + 1):
            state = "completed" if late_rank_enters or seq == 1 or r >= 2 else "started"
            doc["entries"].append(entry("2.10", r, seq, "all_reduce", 4, state, group="5"))
        doc["pg_status"]["5"] = {
            "last_enqueued_collective": calls,
            "last_started_collective": -1,
            "last_completed_collective": calls if late_rank_enters or r >= 2 else 1,
        }
        docs[r] = doc
    return _write(tmp_path, docs)


def test_one_name_over_disjoint_groups_is_two_groups_by_their_recorded_members(tmp_path):
    hang = H.build(_split(tmp_path, late_rank_enters=False))
    assert {n: g.members for n, g in hang.groups.items() if n != "0"} == {
        "5 ranks 0, 1": (0, 1),
        "5 ranks 2, 3": (2, 3),
    }
    assert _stuck(hang.dumps) == {("5 ranks 0, 1", "missing", 2, (1,))}
    top = diagnose(load_evidence(flight_recorder=[tmp_path / "dumps"])).findings[0]
    assert top.title.startswith("rank 1 never entered collective 2 of group_5")
    assert "rank 0 waits" in top.title


def test_the_healthy_twin_of_disjoint_groups_has_nothing_stuck(tmp_path):
    assert _stuck(_split(tmp_path, late_rank_enters=True)) == set()


def test_one_name_with_one_member_set_keeps_its_plain_name(tmp_path):
    """The boundary: every rank records the same members for "5": one group, named as recorded."""
    docs = {
        r: dump("2.10", r, [("all_reduce", 8, "completed"), ("all_reduce", 8, "completed", "5")], 2)
        for r in (0, 1)
    }
    assert set(H.build(_write(tmp_path, docs)).groups) == {"0", "5"}


# ---- one name, several backends of one process: the pg_id (DETAIL strips every name) -----------


def _nameless(tmp_path, late_rank_enters: bool):
    """Two ranks, two NCCL groups (pg_id 0 and 1) both recorded under the empty name, as DETAIL
    leaves them; rank 1 never enters pg 1's #2 unless told to. Both groups count from 1."""
    docs = {}
    for r in (0, 1):
        entries = []
        for pg, seqs in ((0, 3), (1, 2)):
            for seq in range(1, seqs + 1):
                if pg == 1 and seq == 2 and r == 1 and not late_rank_enters:
                    continue
                state = "started" if pg == 1 and seq == 2 and not late_rank_enters else "completed"
                e = entry("2.10", r, seq, "all_reduce", 8 if pg == 0 else 4, state)
                e.update(pg_id=pg, process_group=("", ""), record_id=len(entries))
                entries.append(e)
        doc = {"version": "2.10", "entries": entries, "comm_lib_version": "2.28.9"}
        doc["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[]"}}
        doc["pg_status"] = {
            str(pg): {
                "last_enqueued_collective": max(
                    e["collective_seq_id"] for e in entries if e["pg_id"] == pg
                ),
                "last_started_collective": -1,
                "last_completed_collective": max(
                    e["collective_seq_id"]
                    for e in entries
                    if e["pg_id"] == pg and e["state"] == "completed"
                ),
            }
            for pg in (0, 1)
        }
        docs[r] = doc
    return _write(tmp_path, docs)


def test_backends_under_one_name_are_told_apart_by_pg_id(tmp_path):
    dumps = _nameless(tmp_path, late_rank_enters=False)
    hang = H.build(dumps)
    assert set(hang.groups) == {"pg_id 0", "pg_id 1"}
    assert _stuck(dumps) == {("pg_id 1", "missing", 2, (1,))}
    assert any("2 backends under one name (the empty name)" in n for n in hang.notes)
    assert hang.groups["pg_id 0"].is_default and hang.groups["pg_id 0"].members == (0, 1)


def test_the_healthy_twin_of_nameless_backends_has_nothing_stuck(tmp_path):
    dumps = _nameless(tmp_path, late_rank_enters=True)
    assert _stuck(dumps) == set()
    assert not any("DETAIL's check" in n for n in H.build(dumps).notes)  # no check backend here


# ---- DETAIL's check backend: a check that ran and raised ------------------------------------------


def _detail(tmp_path, second: str):
    """Two gloo ranks with DETAIL: each job collective (pg 0) after its check (pg 1: all_gathers of
    int64 [1] then [7]). `second`: what follows the 2nd check: "none" (it raised), "both" (the job's
    #2 on both ranks), "rank0" (on rank 0 only), "in-flight" (the check's last all_gather unfinished)."""
    docs = {}
    for r in (0, 1):
        entries, seq = [], {0: 0, 1: 0}

        def add(pg, op, sizes, dtype, done=True):
            seq[pg] += 1
            e = entry("2.10", r, seq[pg], op, 1, "scheduled")
            e.update(
                pg_id=pg,
                process_group=("", ""),
                record_id=len(entries),
                profiling_name=f"gloo:{op}",
                input_sizes=[sizes],
                output_sizes=[[2, *sizes]] if op == "all_gather" else [sizes],
                input_dtypes=[dtype],
                output_dtypes=[dtype],
                retired=done,
            )
            entries.append(e)

        for n in (1, 2):
            add(1, "all_gather", [1], "Long")
            add(1, "all_gather", [7], "Long", done=not (n == 2 and second == "in-flight"))
            if n == 1 or second == "both" or (second == "rank0" and r == 0):
                add(0, "all_reduce", [1024], "Float")
        checks_done = 4 - (second == "in-flight")
        doc = {"version": "2.10", "entries": entries, "comm_lib_version": "2.27.5"}
        doc["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[]"}}
        doc["pg_status"] = {
            "0": {k: seq[0] for k in ("last_enqueued_collective", "last_completed_collective")},
            "1": {
                "last_enqueued_collective": seq[1],
                "last_completed_collective": checks_done,
            },
        }
        for status in doc["pg_status"].values():
            status["last_started_collective"] = -1
        docs[r] = doc
    return _write(tmp_path, docs)


@pytest.mark.parametrize(
    "second, expected",
    [
        ("none", {("pg_id 0", "mismatch", 2, ())}),
        ("both", set()),
        ("rank0", {("pg_id 0", "missing", 2, (1,))}),
        ("in-flight", {("pg_id 1", "agreed", 4, ())}),
    ],
)
def test_a_detail_check_that_ran_without_its_collective_is_a_mismatch(tmp_path, second, expected):
    dumps = _detail(tmp_path, second)
    hang = H.build(dumps)
    assert hang.groups["pg_id 1"].checks == "group pg_id 0"
    assert _stuck(dumps) == expected
    if second == "none":
        top = diagnose(load_evidence(flight_recorder=[tmp_path / "dumps"])).findings[0]
        assert (top.rule, top.severity, top.evidence["check_seq"]) == ("hang-mismatch", "error", 4)
        assert "check of it ran on every member and none issued it" in top.title


def test_a_nameless_group_whose_calls_are_not_checks_is_no_check_backend(tmp_path):
    """The boundary of the check's shape: int64 all_gathers of 2-D tensors are a job's own calls."""
    dumps = _detail(tmp_path, "none")
    for d in dumps:
        for i, (core, in_dt, out_dt) in enumerate(d.table.calls):
            if core[1] == "all_gather":
                d.table.calls[i] = ((*core[:4], ((1, 1),), core[5]), in_dt, out_dt)
    hang = H.build(dumps)
    assert hang.groups["pg_id 1"].checks is None and not any(s.check for s in hang.stuck)


@pytest.mark.parametrize("scenario", ["skip", "order", "size-mismatch", "healthy"])
def test_the_recorded_detail_jobs_hold_the_job_and_detail_apart(scenario):
    dumps = read_flight_recorder([RECORDED / "gloo3-detail" / scenario / "dumps"])
    hang = H.build(dumps)
    assert set(hang.groups) == {"pg_id 0", "pg_id 1"}
    assert hang.groups["pg_id 1"].checks == "group pg_id 0"
    job = hang.groups["pg_id 0"]
    ops = {job.call(0, s).op for s in range(1, job.top + 1)}
    assert ops <= {"all_reduce", "broadcast", "all_gather"} and job.is_default
    assert {job.call(0, s).first.input_dtypes for s in range(1, job.top + 1)} == {("Float",)}
