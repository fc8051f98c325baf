"""diagnose's cuts pinned at their boundaries, each on both sides: the severity of a cost's share
(10 % error, 2 % warning), collectives that bound the step (50 %) or cannot matter (below 15 %),
graph coverage (80 %), acceptance (1.5 tokens per cycle) and SGLang's graph lines (99 %, 90 %)."""

import copy

import pytest

from ncclprobe.diagnose import Evidence, diagnose, load_evidence
from ncclprobe.findings import severity_for_share
from tests import diagnose_scenarios as S


@pytest.mark.parametrize(
    "share,severity",
    [(0.10, "error"), (0.0999, "warning"), (0.02, "warning"), (0.0199, "info"), (None, "warning")],
)
def test_severity_follows_the_share_of_the_run(share, severity):
    assert severity_for_share(share) == severity


def _with_share(share: float) -> dict:
    trace = copy.deepcopy(S.recorded("collective-bound.json"))
    for run in trace["runs"]:
        run["collective_share"] = share
    return trace


@pytest.mark.parametrize(
    "share,bound,ruled_out",
    [(0.5, True, False), (0.4999, False, False), (0.15, False, False), (0.1499, False, True)],
)
def test_collective_share_cuts(share, bound, ruled_out):
    result = diagnose(Evidence.from_trace(_with_share(share), "t.json"))
    assert any(f.rule == "collective-bound" for f in result.findings) is bound
    assert ("collective-share" in [r.rule for r in result.ruled_out]) is ruled_out
    if bound:
        top = next(f for f in result.findings if f.rule == "collective-bound")
        costs = {0.5 * run["ms_per_token"] for run in _with_share(0.5)["runs"]}
        assert any(top.cost_ms_per_token == pytest.approx(c) for c in costs)


@pytest.mark.parametrize("coverage,ruled_out", [(0.8, True), (0.7999, False)])
def test_graph_coverage_cut(coverage, ruled_out):
    trace = S.make_all_graphed(S.healthy_trace())
    for run in trace["runs"]:
        run["graph_coverage"] = coverage
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    assert ("graph-coverage" in [r.rule for r in result.ruled_out]) is ruled_out
    assert any(f.rule == "graph-coverage" for f in result.findings) is not ruled_out


def _sglang(tmp_path, accept: float, graphs: list[bool]) -> str:
    lines = [
        f"[2026-01-01 00:00:{i:02d} TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.00, "
        f"accept len: {accept:.2f}, cuda graph: {flag}, gen throughput (token/s): 100.00, #queue-req: 0"
        for i, flag in enumerate(graphs)
    ]
    path = tmp_path / "sglang.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("accept,low", [(1.5, False), (1.49, True)])
def test_acceptance_cut(tmp_path, accept, low):
    result = diagnose(load_evidence(server_logs=[_sglang(tmp_path, accept, [True] * 4)]))
    assert any(f.rule == "acceptance" for f in result.findings) is low
    assert ("acceptance" in [r.rule for r in result.ruled_out]) is not low


@pytest.mark.parametrize(
    "graphed,outcome",
    [(99, "ruled out"), (98, "info"), (90, "info"), (89, "warning")],
)
def test_sglang_graph_lines_cuts(tmp_path, graphed, outcome):
    flags = [True] * graphed + [False] * (100 - graphed)
    result = diagnose(load_evidence(server_logs=[_sglang(tmp_path, 2.0, flags)]))
    found = [f for f in result.findings if f.rule == "log-graphs"]
    if outcome == "ruled out":
        assert not found and "log-graphs" in [r.rule for r in result.ruled_out]
    else:
        assert found[0].severity == outcome


# ---- the arithmetic behind the figures, checked by hand (what the mutation run asked for) -------


def _profile_run(mode, *phases):
    from ncclprobe.evidence.run.view import EngineRun

    return EngineRun(label="p", mode=mode, source="profile", phases={p.name: p for p in phases})


def test_a_profile_costs_share_is_per_cycle_without_a_token_count():
    """No token count (a profile): the share is the cost per cycle over the cycle's phases, each
    weighted by its steps per cycle (verify 10 steps: the cycles); without a verify every phase
    counts once."""
    from ncclprobe.evidence.run.view import Phase

    decode = Phase("decode", "decode", 20, 20.0, 1.0, graphed=True)
    verify = Phase("verify", "verify", 10, 40.0, 4.0, graphed=False, device_ms=1.0, idle_ms=3.0)
    draft = Phase("draft", "draft", 20, 20.0, 1.0, graphed=True)
    ev = Evidence(
        runs=[_profile_run("speculative", verify, draft)],
        kind="profile",
        baseline=[_profile_run("baseline", decode)],
    )
    [eager] = [f for f in diagnose(ev).findings if f.rule == "eager-phase"]
    # cost 3.0 ms per cycle over verify 4.0 x 1 + draft 1.0 x 2 = 6.0 ms per cycle
    assert eager.evidence["share_of_time"] == pytest.approx(0.5)
    only_draft = Phase("draft", "draft", 20, 20.0, 2.0, graphed=False, device_ms=1.0, idle_ms=1.0)
    ev.runs = [_profile_run("speculative", only_draft)]
    [eager] = [f for f in diagnose(ev).findings if f.rule == "eager-phase"]
    assert eager.evidence["share_of_time"] == pytest.approx(
        0.5
    )  # 1.0 of the draft's 2.0, counted once


def test_the_seed_cases_costs_add_up():
    from ncclprobe.diagnose.expectations import expected_verify_ratio

    trace = S.make_seed_case(S.healthy_trace())
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    spec = S.runs(trace, "speculative")[0]
    top = result.top
    assert top.evidence["share_of_time"] == pytest.approx(
        top.cost_ms_per_token / spec["ms_per_token"], abs=1e-4
    )
    ratio = next(f for f in result.findings if f.rule == "verify-ratio")
    decode = S.runs(trace, "baseline")[0]["phases"]["decode"]["median_ms"]
    expected = expected_verify_ratio(trace["config"]).ratio
    # one verify per cycle: the excess per cycle is (measured - expected ratio) x decode
    assert ratio.evidence["excess_ms_per_cycle"] == pytest.approx(
        (2.4 - expected) * decode, abs=1e-3
    )


def test_eager_phase_says_the_trace_graph_mode_when_both_sides_are_eager():
    result = diagnose(Evidence.from_trace(S.healthy_trace(), "t.json"))
    [ruled] = [r for r in result.ruled_out if r.rule == "eager-phase"]
    assert "(graphs: none)" in ruled.reason and "like for like" in ruled.reason


def test_the_slower_finding_writes_its_arithmetic_and_speedup_out():
    trace = S.as_gpu_run(S.healthy_trace())
    for run in trace["runs"]:
        run.pop("repeats", None)
        run["tokens_per_s"] = 100.0 if run["mode"] == "baseline" else 80.0
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    [slower] = [f for f in result.findings if f.rule == "speculative-slower"]
    assert "A cycle costs" in slower.detail and "to break even" in slower.detail
    trace["runs"][1]["tokens_per_s"] = 120.0
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    [ruled] = [r for r in result.ruled_out if r.rule == "speculative-slower"]
    assert "(1.20x)" in ruled.reason
