"""diagnose on the three-rank NCCL jobs recorded on the H200 (tests/fixtures/flight_recorder/nccl3:
NCCL 2.28.9, torch 2.11, three ranks on one GPU), checked against the truth written from the
scenario script (truth.json), not from ncclprobe's output. Three ranks are where a pair is not the
whole job: two ranks wait together, two ranks share one side of a cycle, a third size differs."""

import json
from functools import cache
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence

NCCL3 = Path(__file__).parent / "fixtures" / "flight_recorder" / "nccl3"
TRUTH = json.loads((NCCL3 / "truth.json").read_text())["scenarios"]


@cache
def everything(scenario: str):
    folder = NCCL3 / scenario
    return diagnose(
        load_evidence(
            flight_recorder=[folder / "dumps"],
            logs=[folder / "torchrun.log"],
            nccl_logs=sorted(folder.glob("nccl-rank*.log")),
        )
    )


def errors(scenario: str) -> list:
    return [f for f in everything(scenario).findings if f.severity == "error"]


def test_the_kept_scenarios_are_those_with_every_rank_dumped():
    for scenario in TRUTH:
        assert sorted(p.name for p in (NCCL3 / scenario / "dumps").iterdir()) == [
            f"nccl_trace_rank_{r}" for r in range(3)
        ]


def test_skip_names_the_one_missing_rank_and_both_waiting():
    truth = TRUTH["skip"]
    (top,) = errors("skip")
    assert top.rule == "hang-missing-rank"
    assert (top.evidence["group_desc"], top.evidence["seq"], top.evidence["op"]) == (
        truth["group"],
        truth["seq"],
        truth["op"],
    )
    assert top.evidence["missing_ranks"] == truth["missing_ranks"]
    assert top.evidence["waiting_ranks"] == truth["waiting_ranks"]
    assert top.evidence["last_completed"] == {"2": truth["last_completed_of_missing"]}
    assert top.title.endswith("that ranks 0, 1 wait in")


def test_size_mismatch_names_every_rank_size():
    truth = TRUTH["size-mismatch"]
    (top,) = errors("size-mismatch")
    assert top.rule == "hang-mismatch" and top.evidence["seq"] == truth["seq"]
    for rank, sizes in truth["input_sizes"].items():
        assert f"rank {rank}: all_reduce of {sizes[0]} Float" in top.title
    assert "every rank completed it" in top.detail  # NCCL ran them: no hang, wrong results


def test_order_is_one_swap_at_the_truths_numbers():
    truth = TRUTH["order"]
    (top,) = errors("order")
    assert top.rule == "hang-order"
    assert (top.evidence["seq"], top.evidence["swapped_at"]) == (truth["seq"], truth["swapped_at"])
    assert "all_reduce then broadcast on rank 0, broadcast then all_reduce on rank 1" in top.title


def test_groups_is_one_cycle_with_both_ranks_of_one_side():
    """Ranks 1 and 2 both wait in group_b: the cycle holds them both, and no second finding names
    group_a's missing ranks apart from it (it did before: the cycle explained rank 1 only)."""
    truth = TRUTH["groups"]
    (top,) = errors("groups")
    assert top.rule == "hang-groups"
    desc = {"1": "group_a", "2": "group_b"}
    got = [
        {
            "group": desc[link["group"]],
            "seq": link["seq"],
            "waiting_ranks": link["waiting_ranks"],
            "missing_ranks": link["missing_ranks"],
        }
        for link in top.evidence["cycle"]
    ]
    assert got == truth["cycle"]
    assert "ranks 1, 2 wait in group_b #2 (all_reduce) for rank 0" in top.title


@pytest.mark.parametrize("scenario", sorted(TRUTH))
def test_no_scenario_is_said_to_be_healthy(scenario):
    assert errors(scenario)
    assert not any(f.rule == "hang-none-pending" for f in everything(scenario).findings)


def test_the_recording_script_pairs_each_send_with_a_rank_that_exists():
    """healthy and p2p got no dumps at three ranks: rank 2 was paired with 1 - 2 = -1. Every rank's
    partner must exist and pair back; the last rank of an odd world has none."""
    import importlib.util

    path = Path(__file__).parent.parent / "examples" / "record_flight_recorder.py"
    spec = importlib.util.spec_from_file_location("record_flight_recorder", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for world in range(2, 10):
        partners = {r: script.partner(r, world) for r in range(world)}
        paired = {r: p for r, p in partners.items() if p is not None}
        assert all(0 <= p < world and partners[p] == r for r, p in paired.items())
        assert len(paired) == world - world % 2
    assert script.partner(2, 3) is None and script.partner(0, 3) == 1


def test_the_log_alone_reads_the_same_cycle_and_the_same_missing_rank():
    """torchrun's console of groups also holds each rank's later timeout, in the other group's #2,
    which it issued after its first timeout had fired (the job had failed; the rank went on): the
    log-only reading takes each rank where it first waited, as the dumps show it."""
    groups = diagnose(load_evidence(logs=[NCCL3 / "groups" / "torchrun.log"])).findings[0]
    assert groups.rule == "hang-groups"
    assert [(c["group"], c["seq"]) for c in groups.evidence["cycle"]] == [("1", 2), ("2", 2)]
    skip = diagnose(load_evidence(logs=[NCCL3 / "skip" / "torchrun.log"])).findings[0]
    assert skip.rule == "hang-watchdog" and "rank 2 never entered ALLREDUCE #4" in skip.title


def _timeout_line(rank: int, pg: int, clock: str, ran_ms: int) -> str:
    """A watchdog timeout line as torch 2.11 prints it (its two lines, from nccl3/groups), with
    the rank, group, clock and run time given: HAND-WRITTEN from the recorded lines."""
    desc = {1: "group_a", 2: "group_b"}[pg]
    return (
        f"[default{rank}]:[rank{rank}]:[E1206 {clock} ProcessGroupNCCL.cpp:689] [Rank {rank}] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, "
        f"NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for {ran_ms} milliseconds "
        f"before timing out.\n[default{rank}]:[rank{rank}]:[E1206 {clock} ProcessGroupNCCL.cpp:2303] "
        f"[PG ID {pg} PG GUID {pg}({desc}) Rank {rank}]  failure detected by watchdog at work "
        "sequence id: 2 PG status: last enqueued work: 2, last completed work: 1\n"
    )


@pytest.mark.parametrize(
    "later, kept",
    [("23:49:41.183000000", 1), ("23:48:36.706000000", 1), ("23:48:36.704000000", 2)],
)
def test_a_later_timeout_counts_only_where_it_was_issued_before_the_first_fired(
    tmp_path, later, kept
):
    """The boundary: rank 0 first times out in group_a #2 at 23:48:26.698; its timeout in group_b
    #2 after 10,007 ms, fired at 23:49:41.183 or at 23:48:36.706, was issued after that (1 ms after,
    the latter: left out); fired at 23:48:36.704 it was issued 1 ms before (both pending: kept)."""
    log = tmp_path / "torchrun.log"
    log.write_text(
        _timeout_line(0, 1, "23:48:26.698000000", 10030) + _timeout_line(0, 2, later, 10007)
    )
    from ncclprobe.diagnose.hang.log_collectives import stuck_collectives

    stuck = stuck_collectives(load_evidence(logs=[log]))
    assert len(stuck) == kept and (stuck[0].group, stuck[0].seq) == ("1", 2)


def test_a_rank_waiting_outside_the_cycle_is_not_put_in_it(tmp_path):
    """The twin of groups (HAND-WRITTEN dumps, tests/flight_recorder_dumps.py): three groups over
    ranks 0-2, each rank waiting in a different one. Groups 1 and 2 wait on each other through
    ranks 0 and 1; rank 2 waits in group 3, outside that cycle: it is named apart, not in it."""
    from tests.flight_recorder_dumps import write_job

    warm = [("all_reduce", 8, "completed", g) for g in ("1", "2", "3")]
    calls = {r: [*warm, ("all_reduce", 8, "started", str(r + 1))] for r in range(3)}
    write_job(tmp_path / "dumps", "2.10", calls)
    found = diagnose(load_evidence(flight_recorder=[tmp_path / "dumps"])).findings
    cycle = found[0].evidence["cycle"]
    assert [(c["group"], c["waiting_ranks"], c["missing_ranks"]) for c in cycle] == [
        ("1", [0], [1]),
        ("2", [1], [0]),
    ]
    assert any(
        f.rule == "hang-missing-rank" and f.evidence["missing_ranks"] == [1, 2] for f in found
    )
