"""diagnose on traces the engine records on a GPU: the seed case for real (`--graphs decode`:
decode captured, verify eager) and its fix (`--graphs all`)."""

import pytest
import torch
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import diagnose, load_evidence

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def record(tmp_path, graphs):
    path = tmp_path / f"graphs-{graphs}.json"
    result = CliRunner().invoke(
        cli,
        [
            "-q",
            "run-engine",
            "--preset",
            "small",
            "--graphs",
            graphs,
            "--new-tokens",
            "64",
            "--trace",
            str(path),
        ],
    )
    assert result.exit_code == 0, result.output
    return diagnose(load_evidence(path))


def test_recorded_seed_case_top_finding_is_eager_verify(tmp_path):
    result = record(tmp_path, "decode")
    assert (result.top.rule, result.top.evidence["phase"]) == ("eager-phase", "verify")
    assert result.top.evidence["cost_ms_per_cycle"] > 0


def test_recorded_graphs_all_rules_out_eager_phases(tmp_path):
    result = record(tmp_path, "all")
    assert "eager-phase" not in [f.rule for f in result.findings]
    assert "eager-phase" in [r.rule for r in result.ruled_out]
