"""Findings that claim no more than their evidence (issue 28 §2): what is measured is said to be
measured, what a model or an inference adds is said to be that, with the confidence that follows;
nothing is ruled out from evidence that was never given."""

import copy

import pytest

from ncclprobe.diagnose import Evidence, diagnose
from tests import diagnose_scenarios as S


def run_diagnosis(trace, **extra):
    return diagnose(Evidence.from_trace(trace, "t.json", **extra))


def test_eager_phase_from_the_bytes_model_says_its_cost_is_modelled():
    trace = S.make_seed_case(S.healthy_trace())
    top = run_diagnosis(trace).top
    assert (top.rule, top.severity, top.confidence) == ("eager-phase", "error", "medium")
    assert top.evidence["cost_from"].startswith("model:")
    assert "Modelled, not measured" in top.detail and "residual" in top.detail
    assert "host launch overhead" not in top.detail


def test_eager_phase_where_the_bytes_model_does_not_apply_is_low_confidence():
    """A decode step far below any memory bandwidth (the CPU-sized times of the tiny trace on a GPU
    config): the model's premise fails, and the finding says so."""
    trace = S.make_seed_case(S.healthy_trace())
    for run in trace["runs"]:
        for rec in run["phases"].values():
            for key in ("total_ms", "median_ms", "p90_ms"):
                rec[key] *= 1000.0  # 12 s per decode step: the weights move at MB/s
    top = next(
        f
        for f in run_diagnosis(trace).findings
        if f.rule == "eager-phase" and f.evidence["phase"] == "verify"
    )
    assert top.confidence == "low" and "does not hold for this decode step" in top.detail
