"""Two NCCL ranks recorded on one H200 (tests/fixtures/profiles/ranks/README.md): the healthy run, rank 1
late by 20 ms of host work before each step, late by its own 10 ms GEMM chain, and the host delay with the
layers replayed from a CUDA graph. Each scenario's truth file says which rank is late and by how much.

Every trace is read once per module (`_scenario`). Tolerances: the extra wait per late call within 10 % of
the chosen 20 ms host delay (the healthy twin's arrivals are already 2.2 ms apart: on one GPU the two
processes take turns in ~2.2 ms time slices, so the delay is measured against that, not against zero);
for the GEMM chain between the chain alone (9.41 ms) and while sharing the GPU (21.1 ms); the transfer per
call within 10 % of the healthy twin's."""

from __future__ import annotations

import bisect
import copy
import functools
import json
import os
import statistics
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.run import rules_profile
from ncclprobe.diagnose.run import rules_ranks as RR
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.profile import align as A
from ncclprobe.evidence.run.view import Collective, EngineRun, Phase
from ncclprobe.findings import RuledOut

# the shipped traces this module diagnoses are parsed once per session (conftest.py)
pytestmark = pytest.mark.usefixtures("shared_timelines")

RANKS = Path(__file__).parent / "fixtures" / "profiles" / "ranks"


def _once(fn):
    """Each fixture is read once per module; NCCLPROBE_TESTS_UNCACHED=1 reads it in every test, for a
    mutation tool, which maps each test to the functions it calls (a cache hides them)."""
    return fn if os.environ.get("NCCLPROBE_TESTS_UNCACHED") else functools.cache(fn)


LATE = ("host_late", "gpu_late", "graph_host_late")


@_once
def _truth(scenario: str) -> dict:
    return json.loads((RANKS / f"ranks_{scenario}.truth.json").read_text())


@_once
def _evidence(scenario: str):
    return load_evidence(profiles=[RANKS / f"ranks_{scenario}_rank{r}.json.gz" for r in (0, 1)])


def _timelines(scenario: str):
    """The ranks' timelines, as the evidence read them (each file is parsed once)."""
    return tuple(_evidence(scenario).runs[0].alignment._timelines)


@_once
def _scenario(scenario: str):
    """(alignment, diagnosis) of one scenario, from the traces read once."""
    ev = _evidence(scenario)
    return ev.runs[0].alignment, diagnose(ev)


# the clocks


@pytest.mark.parametrize("scenario", ("healthy",) + LATE)
def test_both_ranks_read_one_clock_through_their_base(scenario):
    """ts + baseTimeNanoseconds is the host's wall clock on both ranks: each step's start, taken with
    time.time_ns() by the recorder (after the host delay on the late rank), precedes the rank's first
    launch call of the step by less than a millisecond. Both traces record the same base."""
    truth = _truth(scenario)
    bases = {tl.header["baseTimeNanoseconds"] for tl in _timelines(scenario)}
    assert len(bases) == 1
    for tl, rank in zip(_timelines(scenario), truth["ranks"]):
        base = tl.header["baseTimeNanoseconds"]
        launches = sorted(launch.ts for launch in tl.launches.values())
        lags = []
        for step in rank["steps"]:
            at_us = (step.get("host_delay_end_ns") or step["start_ns"]) - base
            i = bisect.bisect_left(launches, at_us / 1000.0)
            lags.append(launches[i] - at_us / 1000.0)
        assert 0.0 < statistics.median(lags) < 1000.0, (scenario, rank["rank"])


def test_the_ranks_windows_meet_at_the_first_call_which_is_left_out():
    """The first call waits for the rank whose profiler started last (the truth's first step skew)."""
    for scenario in ("healthy",) + LATE:
        al, _ = _scenario(scenario)
        skew = abs(_truth(scenario)["step_start_skew_ms"]["all"][0])
        assert len(al.opening) == 1 and len(al.calls) == 479
        assert al.opening[0].spread / 1000.0 == pytest.approx(skew, rel=0.1)


# the straggler, its wait, the transfer


@pytest.mark.parametrize("scenario", LATE)
def test_the_late_rank_is_named_with_the_wait_it_causes(scenario):
    truth = _truth(scenario)
    al, result = _scenario(scenario)
    late, share = RR.straggler(al)
    assert late.rank == truth["late_rank"] == 1
    assert late.calls == truth["steps"] - 1  # one late call per step; the first step is the opening
    per_call_ms = late.excess_us / late.calls / 1000.0
    chosen = truth["delay"]["chosen_ms"]
    if truth["delay"]["kind"] == "own extra GEMMs":
        measured = truth["delay"]["measured"]
        assert measured["extra_gemms"]["chain_ms_alone"] < per_call_ms
        assert per_call_ms < measured["chain_ms_in_warmup_steps"]["median"]
    else:
        assert per_call_ms == pytest.approx(chosen, rel=0.10)
    top = result.top
    assert (top.rule, top.severity, top.evidence["straggler_rank"]) == ("rank-skew", "error", 1)
    assert top.evidence["share_of_window"] == pytest.approx(share, abs=1e-4) and share > 0.10


def _moved(call) -> float:
    """From the last arrival to the last end: the time the data moved once every rank was in (the
    longest transfer of any rank)."""
    return max(call.transfer(i) for i in range(len(call.arrivals)))


@pytest.mark.parametrize("scenario", LATE)
def test_the_delay_goes_into_the_wait_not_into_the_transfer(scenario):
    """The data moves as fast as in the healthy twin once both ranks are in; the waiting rank's kernel
    time is mostly waiting; the late rank itself hardly waits."""
    al, _ = _scenario(scenario)
    healthy, _ = _scenario("healthy")
    moved = statistics.median(_moved(c) for c in al.calls)
    assert moved == pytest.approx(statistics.median(_moved(c) for c in healthy.calls), rel=0.10)
    rank0, rank1 = al.totals()
    assert rank0.wait_share > 0.5 and rank1.wait_share < 0.01
    assert rank1.last >= 470 and rank0.early_ends == rank1.early_ends == 0
    for row in al.totals():  # kernel time = wait + transfer, exactly
        kernels = [k for k in _timelines(scenario)[row.rank].kernels if k.coll][1:]
        assert row.wait_us + row.transfer_us == pytest.approx(sum(k.dur for k in kernels), rel=1e-8)


@pytest.mark.parametrize(
    "scenario,host", [("host_late", True), ("graph_host_late", True), ("gpu_late", False)]
)
def test_where_the_late_rank_time_went(scenario, host):
    """A host delay: the late rank's GPU idles and its launch comes late, by about the delay; its own
    GPU work: the GPU is busy with its kernels and the launch came on time."""
    al, result = _scenario(scenario)
    late, _ = RR.straggler(al)
    before = late.idle_us + late.own_kernels_us
    if host:
        assert late.idle_us > 0.95 * before
        assert late.launch_late_us / 1000.0 == pytest.approx(20.0, rel=0.05)
        assert "its host was late" in result.top.detail
    else:
        assert late.own_kernels_us > 0.95 * before and late.launch_late_us < 1000.0
        assert "its own GPU work" in result.top.detail


@pytest.mark.parametrize("scenario", LATE)
def test_nccl_settings_are_never_the_top_lever_when_the_wait_dominates(scenario):
    _, result = _scenario(scenario)
    bound = next(f for f in result.findings if f.rule == "collective-bound")
    assert bound.severity == "info" and "waiting for rank 1" in bound.title
    split = bound.evidence
    assert split["wait_share_of_collective_time"] > split["transfer_share_of_collective_time"]
    [share] = split[
        "collective_share_by_run"
    ].values()  # one run: its label follows its steps' kinds
    assert bound.cost.high < share * split["transfer_share_of_collective_time"] * 100
    assert result.findings.index(bound) > 0


def test_the_healthy_twin_names_no_straggler_and_raises_nothing_above_warning():
    al, result = _scenario("healthy")
    assert RR.straggler(al)[0] is None and not al.late_calls()
    assert "rank-skew" in [r.rule for r in result.ruled_out]
    assert all(f.severity != "error" for f in result.findings)
    assert not [f for f in result.findings if f.rule == "rank-skew"]
    # the ranks take turns on the GPU: each waits about a quarter of its collective time, none is late
    for row in al.totals():
        assert 0.2 < row.wait_share < 0.35 and 200 < row.last < 280
    bound = next(f for f in result.findings if f.rule == "collective-bound")
    assert "no rank arrives last consistently" in bound.title
    # the healthy twin: the collectives' share is where the time goes; what NCCL settings could win
    # there is a bound, and a bound on a healthy run is no warning
    assert bound.severity == "info" and bound.cost.kind == "bound" and bound.cost.low == 0
    assert bound.cost_header().startswith(", at most ") and "(bound)" in bound.cost_header()
    assert not result.actionable()


# matching


def test_the_method_used_is_said_and_graph_replays_are_matched_by_order():
    for scenario in ("healthy", "graph_host_late"):
        al, result = _scenario(scenario)
        assert al.method == A.BY_ORDER and al.clock_confidence == "high"
        assert any("matched across ranks by order" in n for n in result.notes)
    graph = _scenario("graph_host_late")[0]
    assert {c.group for c in graph.calls} == {None} and {c.size_bytes for c in graph.calls} == {
        None
    }
    eager = _scenario("healthy")[0]
    assert {c.group for c in eager.calls} == {"0"} and {c.size_bytes for c in eager.calls} == {
        57344
    }


def _edited(scenario: str):
    return [copy.deepcopy(tl) for tl in _timelines(scenario)]


def test_a_rank_whose_window_began_later_is_paired_by_overlap():
    """Rank 0's first 16 collective kernels dropped (its window began a step later): rank 1's first 16
    have no partner and are skipped, every other call still pairs with its own."""
    tls = _edited("host_late")
    colls = [k for k in tls[0].kernels if k.coll]
    drop = {id(k) for k in colls[:16]}
    tls[0].kernels = [k for k in tls[0].kernels if id(k) not in drop]
    al = A.align(tls)
    assert al.method == A.BY_ORDER and al.unmatched == {0: 0, 1: 16}
    assert len(al.calls) + len(al.opening) == 464 and RR.straggler(al)[0].rank == 1


def test_clocks_that_disagree_fall_back_to_order_alone():
    tls = _edited("host_late")
    tls[1].header["baseTimeNanoseconds"] += 10**10  # ten seconds: no kernel pair overlaps any more
    al = A.align(tls)
    assert al.method == A.BY_ORDER_ONLY and al.clock_confidence == "low"
    assert len(al.calls) == 479 and al.mismatched == 0


def test_a_base_difference_is_shifted_away():
    """The same instants written from another base: ts 1 s smaller, base 1 s larger."""
    tls = _edited("host_late")
    tls[1].header["baseTimeNanoseconds"] += 10**9
    for k in tls[1].kernels:
        k.ts -= 1e6
    al = A.align(tls)
    assert "difference of each profile's baseTimeNanoseconds" in al.clock
    assert RR.straggler(al)[0].excess_us == pytest.approx(
        RR.straggler(_scenario("host_late")[0])[0].excess_us, rel=1e-6
    )


def test_a_missing_base_is_said_and_lowers_the_confidence():
    tls = _edited("host_late")
    del tls[1].header["baseTimeNanoseconds"]
    al = A.align(tls)
    assert al.clock_confidence == "low" and "rank(s) 1 record no baseTimeNanoseconds" in al.clock
    for tl in tls:
        tl.header.pop("baseTimeNanoseconds", None)
    al = A.align(tls)
    assert al.clock_confidence == "medium" and "no profile records" in al.clock


def test_sequence_numbers_win_where_recorded():
    """With `Seq` on every kernel (newer torch), calls pair by it: rank 1 missing call 5 pairs the rest."""
    tls = _edited("healthy")
    for tl in tls:
        for n, k in enumerate(k for k in tl.kernels if k.coll):
            k.args["seq"] = n
    tls[1].kernels = [k for k in tls[1].kernels if not (k.coll and k.args["seq"] == 5)]
    al = A.align(tls)
    assert al.method == A.BY_SEQ and len(al.calls) + len(al.opening) == 479


def test_kernels_that_disagree_in_operation_are_not_one_call():
    tls = _edited("healthy")
    k = [k for k in tls[1].kernels if k.coll][100]
    k.coll = {**k.coll, "op": "all_gather"}
    al = A.align(tls)
    assert al.mismatched == 1 and len(al.calls) + len(al.opening) == 479


def test_one_rank_or_no_collectives_aligns_nothing():
    tls = _timelines("healthy")
    assert A.align(list(tls[:1])) is None
    empty = copy.deepcopy(tls[1])
    empty.kernels = [k for k in empty.kernels if not k.coll]
    assert A.align([tls[0], empty]) is None


# thresholds, each at its boundary, on hand-written calls


def _call(starts, ends=None, last_pos=None) -> A.Call:
    ends = ends or [max(starts) + 100.0] * len(starts)
    arrivals = tuple(
        A.Arrival(s, e, None, "all_reduce", 1024, "0", None) for s, e in zip(starts, ends)
    )
    return A.Call("all_reduce", "0", 1024, tuple(range(len(starts))), arrivals)


def _alignment(calls, ranks=(0, 1)) -> A.Alignment:
    tl = copy.deepcopy(_timelines("healthy")[0])
    tl.kernels = []
    al = A.Alignment(list(ranks), A.BY_ORDER, "one clock", "high", calls=calls)
    # kept (issue 38 §4): the alignment holds each rank's timeline; these calls are hand-placed
    al._timelines, al._shifts = [tl] * len(ranks), [0.0] * len(ranks)
    al.typical_spread_us = statistics.median(c.spread for c in calls)
    return al


def _spaced(late_spreads, typical=100.0, n=100, period=200.0):
    """n calls at which the ranks take turns to arrive `typical` µs after the other (no rank late
    before every call), then one call per (rank, spread) at which that rank arrives `spread` µs
    after the other."""
    calls = [
        _call([i * period, i * period + typical] if i % 2 else [i * period + typical, i * period])
        for i in range(n)
    ]
    for j, (who, spread) in enumerate(late_spreads):
        t = (n + j) * period
        calls.append(_call([t, t + spread] if who == 1 else [t + spread, t]))
    return calls


@pytest.mark.parametrize("spread,late", [(200.0, False), (200.001, True)])
def test_a_call_is_late_over_twice_the_median_spread(spread, late):
    al = _alignment(_spaced([(1, spread)]))
    assert al.typical_spread_us == 100.0 and bool(al.late_calls()) is late


@pytest.mark.parametrize("spread,late", [(10.0, False), (10.001, True)])
def test_a_call_is_late_only_over_ten_microseconds(spread, late):
    al = _alignment(_spaced([(1, spread)], typical=1.0))
    assert bool(al.late_calls()) is late


@pytest.mark.parametrize("others,named", [(300.0, True), (300.001, False)])
def test_the_straggler_causes_twice_any_other_rank_excess(others, named):
    """Rank 1's excess 600 µs (three late calls of 300 over a typical 100); rank 0's `others`."""
    late = [(1, 300.0)] * 3 + [(0, 100.0 + others / 2)] * 2
    al = _alignment(_spaced(late))
    lates = {row.rank: row.excess_us for row in al.lateness()}
    assert lates[1] == pytest.approx(600.0) and lates[0] == pytest.approx(others)
    late_row, share = RR.straggler(al)
    assert share > RR.STRAGGLER_MIN_SHARE and (late_row is not None) is named


@pytest.mark.parametrize("factor,named", [(1.000001, True), (0.999999, False)])
def test_the_straggler_costs_at_least_two_percent_of_the_window(factor, named):
    """99 calls 1 ms apart whose arrivals are 10 µs apart, then one where rank 1 is late by X: the
    excess X - 10 against the window 99 100 + X µs is 2 % at X = (0.02 * 99 100 + 10) / 0.98."""
    boundary = (RR.STRAGGLER_MIN_SHARE * 99_100.0 + 10.0) / (1.0 - RR.STRAGGLER_MIN_SHARE)
    calls = [_call([i * 1000.0, i * 1000.0 + 10.0]) for i in range(99)]
    al = _alignment(calls + [_call([99_000.0, 99_000.0 + boundary * factor])])
    late, share = RR.straggler(al)
    assert share == pytest.approx(RR.STRAGGLER_MIN_SHARE, rel=1e-5)
    assert (late is not None) is named


@pytest.mark.parametrize("busy_to,host", [(500.0, True), (500.001, False)])
def test_the_late_rank_host_when_its_gpu_idles_half_the_time_before(busy_to, host):
    """Rank 1 arrives 1000 µs after rank 0; its own kernel covers [0, busy_to]: idle half of the
    window or more is the host's lateness, less is its GPU work."""
    calls = [_call([i * 10.0, i * 10.0 + 1.0]) for i in range(100)]
    calls.append(_call([1000.0, 2000.0]))
    al = _alignment(calls)
    kernel = copy.copy(_timelines("healthy")[1].kernels[0])
    kernel.ts, kernel.dur = 1000.0, busy_to
    al._timelines = [al._timelines[0], copy.copy(al._timelines[0])]
    al._timelines[1].kernels = [kernel]
    run = EngineRun(label="p", mode=None, source="profile", alignment=al, ranks=[{}, {}])
    [outcome] = RR.ranks_skew(Evidence(runs=[run]))
    assert outcome.evidence["gpu_idle_before_ms"] == pytest.approx(
        (1000.0 - busy_to) / 1000, abs=1e-6
    )
    assert ("its host was late" in outcome.detail) is host


@pytest.mark.parametrize("share,severity", [(1.0, "info"), (0.999, "info")])
def test_collective_bound_warns_only_when_the_moving_part_is_half_the_step(share, severity):
    """Rank 0 waits 100 of its 200 µs: half of the share is waiting, the moving half a bound on what
    NCCL settings could win: info whatever its size (a bound on a healthy run is no warning; it
    was a warning from COLLECTIVE_BOUND_SHARE of the step before issue 36)."""
    from ncclprobe.diagnose.run.rules_collectives import COLLECTIVE_BOUND_SHARE
    from ncclprobe.findings import Finding

    al = _alignment([_call([0.0, 100.0], ends=[200.0, 200.0])] * 3)
    run = EngineRun(label="p", mode=None, source="profile", alignment=al)
    run.ranks = [{"collective_share": share}, {"collective_share": 0.5}]
    from ncclprobe.findings import Cost

    base = Finding(
        rule="collective-bound",
        severity="warning",
        confidence="high",
        title="",
        detail="",
        cost=Cost.bound(share * 10.0, "step", "the collectives' share", total_ms=share * 30.0),
    )
    out = RR.with_wait_split(base, run, share, 10.0, COLLECTIVE_BOUND_SHARE)
    assert out.severity == severity and out.cost.high == pytest.approx(share * 0.5 * 10.0)
    assert out.cost.kind == "bound" and out.cost.covers == ("collective", "transfer")
    assert out.cost.total_ms == pytest.approx(share * 0.5 * 30.0)
    assert "no rank arrives last consistently" in out.title


def test_a_rank_that_ended_before_the_last_arrival_counts_no_negative_transfer():
    al = _alignment([_call([0.0, 500.0], ends=[400.0, 900.0])])
    rank0, rank1 = al.totals()
    assert rank0.transfer_us == 0.0 and rank0.early_ends == 1 and rank0.wait_us == 500.0
    assert rank1.wait_us == 0.0 and rank1.transfer_us == 400.0


@pytest.mark.parametrize("matched,method", [(8, A.BY_ORDER), (7, A.BY_ORDER_ONLY)])
def test_order_matching_gives_up_on_the_clocks_below_half_the_calls(matched, method):
    """16 calls per rank; rank 1's calls from `matched` on come 5 ms later and overlap nothing: with
    half of the calls paired the overlap check is kept, with fewer the ranks are paired by order."""

    def arrivals(late_from):
        out = []
        for i in range(16):
            start = i * 100.0 + (5000.0 if i >= late_from else 0.0)
            out.append(A.Arrival(start, start + 50.0, None, "all_reduce", None, None, None))
        return out

    al = A.Alignment([0, 1], A.BY_ORDER, "", "high")
    # kept (issue 38 §4): the order-matching stage alone; whole traces of 16 calls each cost a file
    calls, how = A._by_order(None, (0, 1), [arrivals(16), arrivals(matched)], al)
    assert how == method
    assert len(calls) == (matched if method == A.BY_ORDER else 16)


# the rules on the view, hand-written


def _phase(name, ms, graphed, coll_ms, kind="verify"):
    return Phase(
        name=name,
        kind=kind,
        count=10,
        total_ms=ms * 10,
        median_ms=ms,
        graphed=graphed,
        device_ms=ms,
        idle_ms=0.0,
        collective_ms=coll_ms,
    )


@pytest.mark.parametrize(
    "slow_coll,verdict", [(4.0, "finding"), (3.999, "ruled out"), (0.1, "ruled out")]
)
def test_nccl_settings_fire_only_on_collectives_that_grew_by_half_the_gap(slow_coll, verdict):
    """Slow phase 10 ms, graphed 4 ms: a 6 ms gap. Collectives 1 ms on the fast side: a growth of 3 ms
    (half the gap) is a finding; less, or a shrink (0.1 against 1.0), is ruled out."""
    run = EngineRun(
        label="profile",
        mode="speculative",
        source="profile",
        phases={
            "verify": _phase("verify", 10.0, False, slow_coll),
            "decode": _phase("decode", 4.0, True, 1.0, "decode"),
        },
        collectives=[
            Collective(
                op="all_reduce",
                size_bytes=1024,
                count=10.0,
                phase="verify",
                time_us=1.0,
                library="NCCL",
            )
        ],
    )
    out = rules_profile.nccl_from_kernels(Evidence(runs=[run], kind="profile"))
    assert ["ruled out" if isinstance(o, RuledOut) else "finding" for o in out] == [verdict]
    if verdict == "finding":
        assert "3.000 ms longer" in out[0].title and "50% of the 6.000 ms gap" in out[0].title
    else:
        assert "wall time with a collective kernel running" in out[0].reason


def test_the_combined_run_reports_the_collectives_of_the_rank_that_waited_least():
    run = _evidence("host_late").runs[0]
    al = run.alignment
    per_call = sum(c.time_us for c in run.collectives) / sum(c.count for c in run.collectives)
    assert per_call == pytest.approx(4400, rel=0.05)  # rank 1's kernels: almost no wait in them
    assert [r["arrived_last"] for r in run.ranks] == [t.last for t in al.totals()]
    assert [r["wait_ms"] for r in run.ranks] == [round(t.wait_us / 1000, 3) for t in al.totals()]


# HolisticTraceAnalysis as a reference (not a dependency: docs/METRICS.md "Profiles" says why)


@pytest.mark.parametrize("scenario", LATE)
def test_holistic_trace_analysis_reads_the_same_wait_and_idle(scenario, tmp_path):
    """HTA counts the waiting rank's whole NCCL kernel time as communication: it equals our wait plus
    transfer (the opening call included); the late rank's idle (host) or compute (its GEMMs) time in
    HTA's temporal breakdown bounds what we find before the late calls, which is most of it."""
    hta = pytest.importorskip("hta.trace_analysis")
    import logging
    import shutil

    logging.disable(logging.WARNING)
    for r in (0, 1):
        shutil.copy(RANKS / f"ranks_{scenario}_rank{r}.json.gz", tmp_path)
    try:
        breakdown = hta.TraceAnalysis(trace_dir=str(tmp_path)).get_temporal_breakdown(
            visualize=False
        )
    finally:
        logging.disable(logging.NOTSET)  # later tests read ncclprobe's own log lines
    rows = {int(row["rank"]): row for _, row in breakdown.iterrows()}
    al, _ = _scenario(scenario)
    waiting = al.totals()[0]
    opening = al.opening[0]
    ours = (
        waiting.wait_us
        + waiting.transfer_us
        + (opening.arrivals[0].end - opening.arrivals[0].start)
    )
    assert rows[0]["non_compute_time(us)"] == pytest.approx(ours, rel=0.01)
    late, _ = RR.straggler(al)
    theirs = rows[1]["compute_time(us)" if scenario == "gpu_late" else "idle_time(us)"]
    before = late.own_kernels_us if scenario == "gpu_late" else late.idle_us
    assert 0.75 * theirs < before <= theirs
