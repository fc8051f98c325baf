"""The rank-skew rule without collectives to match (`rules_ranks.ranks_skew` on runs without an
alignment: its step-time branch), at its boundary on both sides and with the arithmetic its title
shows, on runs built in memory: the mutation check found it reached only through the vLLM trace
(tests/test_profile.py, about a second a case), outside the fast set that
examples/mutation_profile.sh runs against each mutant."""

from __future__ import annotations

import pytest

from ncclprobe.diagnose.run import rules_ranks as R
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.view import EngineRun, Phase


def outcome(by_rank: dict, device: str = "cuda", phase: str = "decode"):
    run = EngineRun(
        label="r",
        mode=None,
        source="profile",
        phases={phase: Phase(phase, "decode", 10, 100.0, 10.0)},
        ranks=[{"rank": r, "phases": {phase: ms}} for r, ms in by_rank.items()],
    )
    [out] = R.ranks_skew(Evidence(runs=[run], config={"device": device}))
    return out


def test_the_slow_rank_is_named_with_its_lead_over_the_fast_one():
    found = outcome({0: 10.0, 1: 13.0, 2: 12.0})
    assert found.title == (
        "rank 1's decode steps take 30% longer than rank 0's (13.000 against 10.000 ms)"
    )
    assert (found.severity, found.confidence) == ("warning", "low")
    assert found.evidence == {
        "phase": "decode",
        "median_ms_by_rank": {0: 10.0, 1: 13.0, 2: 12.0},
        "skew": round(3 / 13, 3),
    }
    assert found.detail.startswith("No collective could be matched across the ranks")
    assert "Rank 1's steps set the job's pace; look at what else runs on its GPU," in found.detail


def test_the_slow_rank_is_found_whichever_order_the_ranks_come_in():
    found = outcome({0: 13.0, 1: 10.0})
    assert found.title.startswith("rank 0's decode steps take 30% longer than rank 1's")


def test_on_cpu_the_skew_is_information():
    assert outcome({0: 10.0, 1: 13.0}, device="cpu").severity == "info"


@pytest.mark.parametrize(
    "slow,flagged",
    [(10.0, True), (10.0 - 1e-6, False)],
    ids=["at-threshold", "under-threshold"],
)
def test_the_threshold_is_a_tenth_of_the_slowest_step(slow, flagged):
    # skew = (slow - fast) / slow: 10 % exactly at 9 against 10 ms
    out = outcome({0: 9.0, 1: slow})
    assert (out.rule, hasattr(out, "severity")) == ("rank-skew", flagged)
    if not flagged:
        # steps alike rule nothing out: said not checked, with what would tell
        assert out.hypothesis == "one rank lags the others" and not hasattr(out, "reason")
        assert out.missing.startswith(
            "the order in which the ranks reach their collectives: their median steps are "
            "within 10% of each other (2 ranks), as in any job that synchronises every step"
        )


def test_a_rank_without_the_phase_is_neither_the_fast_nor_the_slow_one():
    found = outcome({0: 10.0, 1: None, 2: 13.0})
    assert "rank 2's decode steps take 30% longer than rank 0's" in found.title


def test_no_skew_without_two_ranks_timing_the_phase():
    run = EngineRun(
        label="r",
        mode=None,
        source="profile",
        phases={"decode": Phase("decode", "decode", 1, 1.0, 1.0)},
        ranks=[{"rank": 0, "phases": {"decode": 10.0}}, {"rank": 1, "phases": {}}],
    )
    assert R.ranks_skew(Evidence(runs=[run])) == []


def test_the_phase_named_is_the_one_whose_ranks_are_furthest_apart():
    run = EngineRun(
        label="r",
        mode=None,
        source="profile",
        phases={n: Phase(n, n, 10, 100.0, 10.0) for n in ("decode", "verify")},
        ranks=[
            {"rank": 0, "phases": {"decode": 10.0, "verify": 20.0}},
            {"rank": 1, "phases": {"decode": 13.0, "verify": 20.5}},
        ],
    )
    [found] = R.ranks_skew(Evidence(runs=[run], config={"device": "cuda"}))
    assert found.title.startswith("rank 1's decode steps take 30% longer")


def test_steps_under_a_millisecond_are_compared_like_any_other():
    found = outcome({0: 0.5, 1: None, 2: 0.65})
    assert "rank 2's decode steps take 30% longer than rank 0's" in found.title


def test_the_wait_split_shows_its_arithmetic_per_token():
    """Rank 0 waits 100 of its 200 µs at each call: of a 0.8 share, 40 % waiting and 40 % moving;
    the moving part's cost per token from the run's ms per token, per `unit` in the detail."""
    from ncclprobe.findings import Cost, Finding
    from tests.test_profile_ranks import _alignment, _call

    al = _alignment([_call([0.0, 100.0], ends=[200.0, 200.0])] * 3)
    run = EngineRun(label="p", mode=None, source="profile", alignment=al, ms_per_token=2.0)
    run.ranks = [{"collective_share": 0.8}, {"collective_share": 0.5}]
    base = Finding(
        rule="collective-bound",
        severity="warning",
        confidence="high",
        title="",
        detail="",
        cost=Cost.bound(8.0, "token", "the collectives' share", total_ms=80.0),
    )
    out = R.with_wait_split(base, run, 0.8, 10.0, 0.5, unit="token")
    assert out.title == (
        "collectives take 80% of the step time: 40% waiting for the other ranks "
        "(no rank arrives last consistently), 40% moving data"
    )
    assert out.detail.startswith("On rank 0, the rank with the largest collective share, 50% of")
    assert "at most 4.000 ms of the 10.000 ms per token." in out.detail
    # the moving part, a bound: at most 0.4 x 10 ms per token, 0.4 / 0.8 of the run's 80 ms
    assert out.cost.high == pytest.approx(0.4 * 10.0) and out.cost.unit == "token"
    assert out.cost.total_ms == pytest.approx(40.0) and out.cost.low == 0.0
    plain = R.with_wait_split(base, run, 0.8, 10.0, 0.5)
    assert "ms per step." in plain.detail


def test_calls_by_sequence_number_are_those_every_rank_recorded_in_its_group():
    from ncclprobe.evidence.run.profile import align as A

    def arrivals(*seqs):
        return [A.Arrival(10.0 * s, 10.0 * s + 5, None, "all_reduce", 64, "g", s) for s in seqs]

    # rank 0 lacks seq 1 (its trace began later), rank 1 lacks seq 4 (it ended sooner)
    # kept (issue 38 §4): the sequence-matching stage alone, as test_profile_ranks' order stage
    calls = A._by_seq("g", (0, 1), [arrivals(2, 3, 4), arrivals(1, 2, 3)])
    assert [tuple(a.seq for a in c.arrivals) for c in calls] == [(2, 2), (3, 3)]
    assert {c.group for c in calls} == {"g"} and calls[0].members == (0, 1)


def test_the_wait_split_evidence_keys_and_no_cost_per_token_without_tokens():
    """The JSON keys a user reads, the shares rounded to three places (a third waiting here)."""
    from ncclprobe.findings import Finding
    from tests.test_profile_ranks import _alignment, _call

    al = _alignment([_call([0.0, 100.0], ends=[300.0, 300.0])] * 3)
    run = EngineRun(label="p", mode=None, source="profile", alignment=al)
    run.ranks = [{"collective_share": 0.8}, {"collective_share": 0.5}]
    base = Finding(
        rule="collective-bound",
        severity="warning",
        confidence="high",
        title="",
        detail="",
        evidence={"share": 0.8},
    )
    out = R.with_wait_split(base, run, 0.8, 10.0, 0.5)
    assert out.evidence == {
        "share": 0.8,
        "rank": 0,
        "wait_share_of_collective_time": 0.333,
        "transfer_share_of_collective_time": 0.667,
        "straggler_rank": None,
    }
    assert out.cost is None  # the finding it splits had no cost: none is made up
