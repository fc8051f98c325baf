"""The graph-share cut of the profile reader (steps.GRAPHED_SHARE, docs/METRICS.md "Profiles"):
a step whose kernel time is at least half graph-launched is a graph replay, pinned on a
hand-written trace that mixes graphed and eager steps (tests/fixtures/profiles/INDEX.md)."""

from pathlib import Path

import pytest

from ncclprobe.diagnose import load_evidence
from ncclprobe.evidence.run.profile.steps import GRAPHED_SHARE

MIXED = Path(__file__).parent / "fixtures" / "profiles" / "handwritten_graph_share_cut_4steps.json"


def test_a_step_half_graph_launched_is_a_replay_and_just_under_half_is_not():
    assert GRAPHED_SHARE == 0.5
    [run] = load_evidence(profiles=[MIXED]).runs
    graphed, eager = run.phases["ProfilerStep"], run.phases["ProfilerStep (kernel by kernel)"]
    assert (graphed.count, graphed.graphed, graphed.graph_share) == (2, True, pytest.approx(0.75))
    assert (eager.count, eager.graphed, eager.graph_share) == (2, False, pytest.approx(0.245))
    # coverage: each step's span weighted by its own share, (1 + 0.5 + 0.49 + 0) / 4
    assert run.graph_coverage == pytest.approx(0.4975)
