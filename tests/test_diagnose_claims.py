"""Findings that claim no more than their evidence (issue 28 §2): what is measured is said to be
measured, what a model or an inference adds is said to be that, with the confidence that follows;
nothing is ruled out from evidence that was never given."""

import json
from pathlib import Path

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


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


def test_a_stand_in_size_alone_can_neither_trigger_nor_clear_the_2x_cut():
    """The hand-written sweep measured half of each size the recorded engine run issued, 1180 us
    each. The baseline run's collectives then cost between 1.50x (if time doubles with size) and
    3.00x (if it does not change) the sweep: open, so not checked (the old rule said 3.0x, a
    finding made by the stand-in alone). The speculative run is above 2x over the whole range."""
    from ncclprobe.diagnose import load_evidence

    result = diagnose(
        load_evidence(
            S.TRACES / "collective-bound.json",
            sweep=FIXTURES / "results" / "handwritten_sweep_half_sizes.jsonl",
        )
    )
    verdicts = {
        (item.hypothesis if hasattr(item, "hypothesis") else item.title).split(":")[0]: item
        for item in result.findings + result.ruled_out + result.not_checked
        if item.rule == "collectives-vs-sweep"
    }
    base, spec = verdicts["untuned baseline"], verdicts["untuned speculative"]
    assert type(base).__name__ == "NotChecked" and "between 1.50x and 3.00x" in base.missing
    assert "--sizes 256,4K" in base.next_command
    assert type(spec).__name__ == "Finding" and spec.evidence["ratio"] > 2.0
    assert spec.evidence["ratio_most"] > spec.evidence["ratio"]
    assert "at most: sweep sizes within 2x stand in" in spec.detail
    assert "outside NCCL's algorithm choice" not in spec.detail
    assert "NCCL_DEBUG_SUBSYS=TUNING" in spec.detail


@pytest.mark.parametrize("ratio,verdict", [(1.99, "ruled out"), (2.01, "finding")])
def test_the_2x_cut_at_exact_sizes(tmp_path, ratio, verdict):
    """With the sweep at the engine's own sizes the cut is the ratio itself: <= 2 is ruled out."""
    import json

    from ncclprobe.diagnose import load_evidence

    trace = S.recorded("collective-bound.json")
    run = S.runs(trace, "baseline")[0]
    measured = run["collective_share"] * run["ms_per_token"]
    calls = sum(s["count"] for s in run["collectives"]["sizes"])
    time_us = measured * run["new_tokens"] * 1000.0 / (ratio * calls)
    header = {
        "record": "header",
        "schema_version": 1,
        "kind": "sweep",
        "backend": "gloo",
        "nranks": 2,
    }
    rows = [
        {
            "record": "result",
            "config_id": "default",
            "settings": {},
            "collective": "all_reduce",
            "mode": "eager",
            "size_bytes": size,
            "nranks": 2,
            "status": "ok",
            "time_us": time_us,
        }
        for size in (256, 1024, 4096)
    ]
    sweep = tmp_path / "sweep.jsonl"
    sweep.write_text("".join(json.dumps(r) + "\n" for r in [header, *rows]))
    trace_path = tmp_path / "t.json"
    trace_path.write_text(json.dumps(trace))
    result = diagnose(load_evidence(trace_path, sweep=sweep))
    names = [f.title for f in result.findings if f.rule == "collectives-vs-sweep"] + [
        r.hypothesis for r in result.ruled_out if r.rule == "collectives-vs-sweep"
    ]
    base = [n for n in names if n.startswith("untuned baseline")]
    kinds = "finding" if any(f.title in base for f in result.findings) else "ruled out"
    assert len(base) == 1 and kinds == verdict


def test_a_server_log_alone_rules_no_collective_cause_out():
    """With only a vLLM server log, nothing shows collectives: not checked, never 'no collective
    kernel ran'."""
    from ncclprobe.diagnose import load_evidence

    log = FIXTURES / "server_logs" / "vllm_0.22_mtp_spec_decoding_dgx_spark.log"
    result = diagnose(load_evidence(server_logs=[log]))
    assert "collectives-vs-sweep" not in [r.rule for r in result.ruled_out]
    [missing] = [n for n in result.not_checked if n.rule == "collectives-vs-sweep"]
    assert "a server log records none" in missing.missing


NVLINK_H100 = {
    "links": "nvlink-all",
    "nvlink": True,
    "over_network": False,
    "compute_capabilities": [90],
}
PCIE = {"links": "no-nvlink", "nvlink": False, "over_network": False, "compute_capabilities": [90]}
COLLECT_NVLINK = (
    FIXTURES / "collect_env" / "vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"
)


def _ll128_run(node) -> dict:
    trace = S.as_gpu_run(S.recorded("tuned.json"))
    trace["node"] = node
    for run in trace["runs"]:
        run["settings"] = {"NCCL_PROTO": "LL128"}
        for worker in run["workers"]:
            worker["env_at_comm_init"] = {**worker["env_at_comm_init"], "NCCL_PROTO": "LL128"}
            worker["nccl_version"] = "2.21.5"
    return trace


def _ll128_findings(trace, collect_env=None):
    """diagnose of a trace, with a collect-env text beside it, as the command loads them."""
    import tempfile

    from ncclprobe.diagnose import load_evidence

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        path.write_text(json.dumps(trace))
        ev = load_evidence(path, collect_env=collect_env)
    return [f for f in diagnose(ev).findings if f.rule == "unsafe-settings" and "LL128" in f.title]


def _pcie_collect_env(tmp_path):
    path = tmp_path / "collect_env_pcie.txt"
    path.write_text(COLLECT_NVLINK.read_text().replace("NV18", "PHB"))
    return path


def test_the_runs_own_node_wins_over_a_collect_env_topology(tmp_path):
    # the run's own GPUs are NVLink H100s (NCCL keeps LL128 on): a PCIe collect-env text does not change it
    assert _ll128_findings(_ll128_run(NVLINK_H100), _pcie_collect_env(tmp_path)) == []
    # the run's own GPUs are PCIe: an NVLink collect-env text does not clear it
    [finding] = _ll128_findings(_ll128_run(PCIE), COLLECT_NVLINK)
    assert (finding.severity, finding.confidence) == ("error", "high")
    assert "the run's own record" in finding.detail and finding.evidence["node_from"].startswith(
        "the run's own"
    )


def test_a_collect_env_topology_standing_in_says_whose_it_is(tmp_path):
    [finding] = _ll128_findings(_ll128_run(None), _pcie_collect_env(tmp_path))
    assert (finding.severity, finding.confidence) == ("error", "medium")
    assert "collect_env_pcie.txt (the collecting shell's machine" in finding.detail
    assert "if the run used other GPUs, this verdict is not about them" in finding.detail
    assert _ll128_findings(_ll128_run(None), None)[0].evidence["node_from"] is None


def test_eager_phase_is_not_ruled_out_for_phases_of_unknown_graph_mode():
    """A profile's phase whose graph mode is not known (graphed None) is not 'a graph replay'."""
    from ncclprobe.evidence.run.view import EngineRun, Phase

    def run(mode, phase):
        return EngineRun(label="p", mode=mode, source="profile", phases={phase.name: phase})

    decode = Phase("decode", "decode", 10, 10.0, 1.0, graphed=True)
    verify = Phase("verify", "verify", 10, 20.0, 2.0, graphed=None)
    ev = Evidence(
        runs=[run("speculative", verify)], kind="profile", baseline=[run("baseline", decode)]
    )
    result = diagnose(ev)
    assert "eager-phase" not in [r.rule for r in result.ruled_out]
    assert any(n.rule == "eager-phase" and "verify" in n.missing for n in result.not_checked)
    ev.runs[0].phases["verify"] = Phase("verify", "verify", 10, 20.0, 2.0, graphed=True)
    assert "eager-phase" in [r.rule for r in diagnose(ev).ruled_out]


def test_a_profile_without_steps_exits_1_and_prints_no_empty_evidence_line(tmp_path):
    """A run with no findings must be a healthy run, not an unread one: no step found is a finding
    (exit 1) with what is missing, and it has no evidence to list (an empty 'evidence:' line was
    printed)."""
    from click.testing import CliRunner

    from ncclprobe.cli import cli

    trace = tmp_path / "cpu_only.json"
    event = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::add",
        "ts": 10,
        "dur": 5,
        "pid": 1,
        "tid": 1,
    }
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [event]}))
    result = CliRunner().invoke(cli, ["diagnose", "--profile", str(trace)], prog_name="ncclprobe")
    assert result.exit_code == 1, result.output
    assert "no step could be found in the profile" in result.output
    assert "evidence:" not in result.output
