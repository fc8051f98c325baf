"""Plain PyTorch jobs on gloo (tests/fixtures/profiles/gloo, README there): 2, 3 and 4 CPU ranks,
one of them late before every step, and their healthy twins, read through `diagnose --profile`.

What each must read right (issue 36): NCCL is never a lever (it never ran); no CUDA graph is
claimed in a CPU-only profile; the late rank is named from who arrives last at the all-reduces (a
job that synchronises every step takes the same time per step on every rank); its numbers are
the trace's, recomputed here from the raw events; the healthy twin names no late rank and nothing
above info; every cost counted once (the time ledger).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence

GLOO = Path(__file__).parent / "fixtures" / "profiles" / "gloo"
JOBS = {"gloo_ddp2": 2, "gloo_ddp3": 3, "gloo_ddp4": 4}
CASES = [(job, scenario) for job in JOBS for scenario in ("host_late", "healthy")]


def _files(job: str, scenario: str) -> list[Path]:
    return [GLOO / f"{job}_{scenario}_rank{r}.json.gz" for r in range(JOBS[job])]


def _truth(job: str, scenario: str) -> dict:
    return json.loads((GLOO / f"{job}_{scenario}.truth.json").read_text())


@pytest.fixture(scope="module")
def diagnosed(shared_timelines):
    done = {}

    def get(job, scenario):
        if (job, scenario) not in done:
            ev = load_evidence(profiles=_files(job, scenario))
            done[(job, scenario)] = (ev, diagnose(ev))
        return done[(job, scenario)]

    return get


def _words(result) -> list[str]:
    return (
        [f.title for f in result.findings]
        + [f.detail for f in result.findings]
        + [f.next_command for f in result.findings]
        + result.notes
    )


@pytest.mark.parametrize("job,scenario", CASES)
def test_nccl_is_no_lever_and_no_graph_is_claimed(diagnosed, job, scenario):
    ev, result = diagnosed(job, scenario)
    assert ev.config["backend"] == "gloo" and ev.config["device"] == "cpu"
    nccl = next(r for r in result.ruled_out if r.rule == "nccl-settings")
    assert "ran on gloo" in nccl.reason and "not NCCL" in nccl.reason
    for text in _words(result):
        assert "CUDA graph" not in text and "replayed from" not in text, text
        # NCCL is named only as what does not act here
        for at in [i for i in range(len(text)) if text.startswith("NCCL setting", i)]:
            before = text[max(0, at - 40) : at + 60]
            assert "do not act" in before or "act on none" in before or "not NCCL" in before, text
    assert {c.library for c in ev.runs[0].collectives} == {"gloo"}


@pytest.mark.parametrize("job", JOBS)
def test_the_late_rank_is_named_by_who_arrives_last(diagnosed, job):
    truth = _truth(job, "host_late")
    ev, result = diagnosed(job, "host_late")
    late = next(f for f in result.findings if f.rule == "rank-skew")
    assert late.evidence["straggler_rank"] == truth["late_rank"]
    assert late.severity in ("warning", "error") and late.cost.kind == "profiled"
    # every rank's steps take the same time (the job synchronises every step): from its first
    # step's start to its last's, the ranks' profiled steps span within 10 % of each other
    totals = [
        rank["steps"][-1]["start_ns"] - rank["steps"][0]["start_ns"] for rank in truth["ranks"]
    ]
    assert (max(totals) - min(totals)) / max(totals) < 0.10
    # late before every call: found by arriving last far more often than chance allows, or, where
    # some calls stand out against the typical one, by those, with the last arrivals said
    if late.evidence["found_by"] == "arrives last more often than chance":
        assert late.evidence["chance_of_arriving_last_this_often"] < 1e-3
    else:
        assert "It also arrives last at 11 of 11 calls" in late.detail
    # it came at least about the chosen delay after the next-latest rank, never more than the
    # latest it was measured ready after another rank's step start
    measured = truth["delay"]["measured"]["late_rank_ready_after_other_start_ms"]
    assert 0.9 * truth["delay"]["chosen_ms"] <= late.evidence["median_late_ms"] <= measured["max"]


@pytest.mark.parametrize("job,scenario", CASES)
def test_the_straggler_numbers_are_the_traces_own(diagnosed, job, scenario):
    """The typical spread, the late rank's calls, margins and window, recomputed from the raw
    `gloo:all_reduce` events of every rank (their i-th calls are one call; the first is where the
    profiling windows meet, left out): a figure off by any factor fails."""
    ev, result = diagnosed(job, scenario)
    starts, ends = [], []
    for path in _files(job, scenario):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        ops = sorted(
            (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "gloo:all_reduce"
        )
        starts.append([s for s, _ in ops])
        ends.append([e for _, e in ops])
    calls = list(zip(*starts))[1:]
    spreads = [max(c) - min(c) for c in calls]
    al = ev.runs[0].alignment
    assert len(al.calls) == len(calls) == 11
    assert al.typical_spread_us == pytest.approx(statistics.median(spreads), rel=1e-9)
    window = max(e[-1] for e in ends) - min(calls[0])
    assert al.window_us == pytest.approx(window, rel=1e-9)
    lasts = [max(range(len(c)), key=lambda r: c[r]) for c in calls]
    outcome = next(
        (f for f in result.findings if f.rule == "rank-skew"),
        next((r for r in result.ruled_out if r.rule == "rank-skew"), None),
    )
    if scenario == "healthy":
        assert outcome.__class__.__name__ == "RuledOut"
        for rank in range(JOBS[job]):
            assert f"rank {rank} at {lasts.count(rank)}" in outcome.reason
        return
    rank = outcome.evidence["straggler_rank"]
    typical = statistics.median(spreads)
    if outcome.evidence["found_by"] == "late calls":  # the calls over 2x the typical spread
        late = [
            sp for sp, last in zip(spreads, lasts) if last == rank and sp > max(2 * typical, 10.0)
        ]
        assert outcome.evidence["late_calls"] == len(late) >= 1
        assert outcome.evidence["median_late_ms"] == pytest.approx(
            statistics.median(late) / 1000, abs=1e-4
        )
        excess = sum(sp - typical for sp in late)
        assert outcome.evidence["excess_wait_ms"] == pytest.approx(excess / 1000, abs=1e-3)
        assert outcome.evidence["share_of_window"] == pytest.approx(excess / window, abs=1e-4)
        return
    mine = [c for c, last in zip(calls, lasts) if last == rank]
    margins = [sorted(c)[-1] - sorted(c)[-2] for c in mine]
    assert outcome.evidence["late_calls"] == len(mine) == lasts.count(rank)
    assert outcome.evidence["median_late_ms"] == pytest.approx(
        statistics.median(margins) / 1000, abs=1e-4
    )
    assert outcome.evidence["excess_wait_ms"] == pytest.approx(sum(margins) / 1000, abs=1e-3)
    assert outcome.evidence["typical_spread_ms"] == pytest.approx(
        statistics.median(spreads) / 1000, abs=1e-4
    )
    assert outcome.evidence["share_of_window"] == pytest.approx(sum(margins) / window, abs=1e-4)


@pytest.mark.parametrize("job", JOBS)
def test_the_healthy_twin_names_no_late_rank_and_nothing_above_info(diagnosed, job):
    _, result = diagnosed(job, "healthy")
    assert not [f for f in result.findings if f.rule == "rank-skew"]
    assert not result.actionable(), [f.title for f in result.actionable()]
    assert result.verdict().exit_code == 0
    bound = next(f for f in result.findings if f.rule == "collective-bound")
    assert bound.cost.kind == "bound" and "(bound)" in bound.cost_header()


@pytest.mark.parametrize("job,scenario", CASES)
def test_costs_add_up_to_no_more_than_the_run(diagnosed, job, scenario):
    _, result = diagnosed(job, scenario)
    (account,) = result.to_json()["ledger"]
    claimed = sum(f.cost.total_ms for f in result.findings if f.cost and f.cost.total_ms)
    assert claimed <= account["total_ms"] + 1e-6
    assert account["attributed_ms"] + account["unexplained_ms"] == pytest.approx(
        account["total_ms"], abs=1e-3
    )


@pytest.mark.parametrize("job", sorted(JOBS))
def test_the_number_of_ranks_read_is_said(diagnosed, job):
    """A directory of N ranks' profiles: the head says N ranks read (their ranges) and the run's
    JSON carries rank_count; one rank's profile alone says nothing of ranks (its twin)."""
    ev, result = diagnosed(job, "healthy")
    n = JOBS[job]
    head = "\n".join(result.sections[0].lines)
    ranks = "ranks 0, 1" if n == 2 else f"ranks 0-{n - 1}"
    assert f"{n} ranks read, one profile each ({ranks})" in head
    assert [r["rank_count"] for r in result.document["runs"]] == [n]
    single = diagnose(load_evidence(profiles=_files(job, "healthy")[:1]))
    assert "ranks read" not in "\n".join(single.sections[0].lines)


@pytest.mark.parametrize("job", JOBS)
def test_the_split_of_the_collective_time_reads_as_plain_sentences(diagnosed, job):
    """The late rank's job: the collective-bound finding splits waiting from moving data and names
    gloo's own levers for the moving part, in whole sentences (no lever list spliced into one)."""
    _, result = diagnosed(job, "host_late")
    [bound] = [f for f in result.findings if f.rule == "collective-bound"]
    tail = bound.detail.split("Work on the waiting first: ", 1)[1]
    assert re.fullmatch(
        r"no setting of the collectives shortens it\. The moving part is at most [0-9.]+ ms of "
        r"the [0-9.]+ ms per (step|token)\. Fewer or larger collectives act on it, and so do the "
        r"levers of what moved the data: for gloo, the host network interface its TCP connections "
        r"use \(GLOO_SOCKET_IFNAME\), or a GPU backend \(NCCL\) for GPU tensors\. NCCL settings "
        r"act on none of it: NCCL did not run\.",
        tail,
    ), tail
