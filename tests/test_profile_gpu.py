"""diagnose --profile on our engine's own profiles recorded on a GPU: the seed case for real
(`--graphs decode`: the verify step launched kernel by kernel beside a captured decode step) and
its fix (`--graphs all`), with NCCL kernels eager and replayed (`--single-rank-collectives`)."""

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
    out = tmp_path / f"graphs-{graphs}"
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
            "16",
            "--single-rank-collectives",
            "--profile",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return load_evidence(
        profiles=[out / "untuned-speculative-rank0.trace.json.gz"],
        baseline_profiles=[out / "untuned-baseline-rank0.trace.json.gz"],
    )


def test_profiled_seed_case_names_the_eager_verify(tmp_path):
    ev = record(tmp_path, "decode")
    assert ev.baseline[0].phases["decode"].graphed is True
    assert (
        ev.runs[0].phases["verify"].graphed is False
        and ev.runs[0].phases["verify"].tokens_per_seq == 4.0
    )
    result = diagnose(ev)
    assert (result.top.rule, result.top.evidence["phase"]) == ("eager-phase", "verify")
    assert result.top.cost.high > 0
    assert any(r.rule == "nccl-settings" for r in result.ruled_out)
    # one-rank NCCL moves nothing and launches no kernel (seen on the H200, NCCL 2.28.9): the profile
    # holds only the host's nccl:all_reduce calls, so no collective kernel may be reported
    assert not ev.baseline[0].collectives and not ev.runs[0].collectives


def test_profiled_graphs_all_rules_the_eager_phase_out(tmp_path):
    ev = record(tmp_path, "all")
    assert ev.runs[0].phases["verify"].graphed is True
    result = diagnose(ev)
    assert "eager-phase" not in [f.rule for f in result.findings]
    assert "eager-phase" in [r.rule for r in result.ruled_out]
