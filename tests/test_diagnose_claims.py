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


def _env_check(variable: str, value: str, expectations=True) -> dict:
    """An env-check document (the shape `ncclprobe env-check --format json` writes) of a launcher
    and three workers, the third without `variable`."""
    workers = [
        {
            "pid": 100 + i,
            "ppid": 10,
            "readable": True,
            "role": "worker",
            "env": {"NCCL_PROTO": "LL", **({variable: value} if i < 2 else {})},
            "checks": [{"variable": "NCCL_PROTO", "status": "ok"}] if expectations else [],
        }
        for i in range(3)
    ]
    return {
        "kind": "env-check",
        "root_pid": 10,
        "expectations": [{"variable": "NCCL_PROTO", "value": "LL", "source": "--expect"}]
        if expectations
        else [],
        "processes": [{"pid": 10, "ppid": 1, "readable": True, "env": {}, "checks": []}, *workers],
        "verdict": {"checked_pids": [100, 101, 102], "findings": []},
    }


@pytest.mark.parametrize(
    "variable,value,severity",
    [
        ("NCCL_DEBUG", "INFO", "info"),
        ("NCCL_DEBUG_SUBSYS", "INIT,ENV", "info"),
        ("NCCL_ALGO", "Ring", "error"),
    ],
)
def test_a_sibling_lacking_a_log_setting_is_no_mismatch_of_collectives(variable, value, severity):
    result = run_diagnosis(
        S.healthy_trace(), env_check=_env_check(variable, value), env_check_path="ec.json"
    )
    [sibling] = [f for f in result.findings if f.rule == "env-check-sibling"]
    assert sibling.severity == severity and "pid 102" in sibling.title
    assert "every collective" not in sibling.detail
    if severity == "info":
        assert "changes only what NCCL logs" in sibling.detail
        assert "env-check" in [r.rule for r in result.ruled_out]  # the expectation was met
    else:
        assert "no longer agree" in sibling.detail


def test_env_check_without_expectations_rules_nothing_out():
    doc = _env_check("NCCL_DEBUG", "INFO", expectations=False)
    result = run_diagnosis(S.healthy_trace(), env_check=doc, env_check_path="ec.json")
    assert "env-check" not in [r.rule for r in result.ruled_out]
    [missing] = [n for n in result.not_checked if n.rule == "env-check"]
    assert "no expectation" in missing.missing
