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
