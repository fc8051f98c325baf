"""The draft's own limits say what they read and what they infer: draft-target's acceptance claim
follows the acceptance measured in the same run (LOW_ACCEPTANCE, 1.5 tokens per cycle, at its
boundary); draft-positions never asserts a fall in acceptance this trace cannot show."""

import copy

import pytest

from ncclprobe.diagnose import Evidence, diagnose
from ncclprobe.diagnose.run.rules_log import LOW_ACCEPTANCE
from tests import diagnose_scenarios as S


def _with_acceptance(trace: dict, histogram: list[int]) -> dict:
    """The speculative run's acceptance histogram (cycles that kept 0..k drafts), its mean length
    recomputed as the trace's reader does (bonus included)."""
    t = copy.deepcopy(trace)
    for run in S.runs(t, "speculative"):
        cycles = sum(histogram)
        run["acceptance"] = {
            "mean_length": sum((i + 1) * n for i, n in enumerate(histogram)) / cycles,
            "histogram": list(histogram),
            "cycles": cycles,
        }
    return t


def _other_target(trace: dict) -> dict:
    t = copy.deepcopy(trace)
    t["config"]["draft_target"] = {"preset": "tiny", "seed": 0}
    t["config"]["target"] = {"preset": "tiny", "seed": 1}
    return t


def _draft_target(trace: dict):
    found = [f for f in diagnose(Evidence.from_trace(trace, "t.json")).findings]
    return next(f for f in found if f.rule == "draft-target")


@pytest.mark.parametrize(
    "histogram,severity,says",
    [
        (
            [0, 0, 1, 1],
            "info",
            "yet here it accepts 3.50",
        ),  # 3.50: the claim of 'little' is false here
        ([1, 1, 0, 0], "info", "yet here it accepts 1.50"),  # the boundary: 1.5 is not low
        ([3, 1, 0, 0], "warning", "here it accepts little: at most 1.25"),
    ],
)
def test_draft_target_says_what_this_runs_acceptance_shows(histogram, severity, says):
    finding = _draft_target(_with_acceptance(_other_target(S.healthy_trace()), histogram))
    assert (finding.severity, finding.confidence) == (severity, "high")
    assert says in finding.detail
    assert ("accepts little" in finding.detail) is (severity == "warning")
    assert finding.evidence["low_acceptance_below"] == LOW_ACCEPTANCE == 1.5


def test_draft_target_without_measured_acceptance_says_it_is_expected():
    trace = _other_target(S.healthy_trace())
    for run in S.runs(trace, "speculative"):
        run["acceptance"] = {"mean_length": None, "histogram": None, "cycles": 0}
    finding = _draft_target(trace)
    assert finding.severity == "warning" and "expected to accept little" in finding.detail
    assert "records no acceptance" in finding.detail


def test_draft_positions_infers_the_fall_and_says_so():
    trace = copy.deepcopy(S.healthy_trace())
    trace["config"]["draft_trained_positions"] = 8
    [finding] = [
        f
        for f in diagnose(Evidence.from_trace(trace, "t.json")).findings
        if f.rule == "draft-positions"
    ]
    assert finding.confidence == "low"
    assert "Not measured in this run: whether its acceptance fell" in finding.detail
    assert "the acceptance falls" not in finding.detail
    assert finding.evidence["acceptance_by_position"] is None
    assert (
        "Acceptance over this whole run: untuned speculative 2.70 tokens per cycle."
        in finding.detail
    )
