"""Outputs that say what they mean (issue 31, item 4): each a newcomer's stop, on real inputs."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ncclprobe.cli import cli

FIX = Path(__file__).parent / "fixtures"


def test_vllm_v0_stage_times_are_per_step_verify_and_draft_times():
    """vLLM V0's `SpecDecodeWorker stage times: ... scoring_time_ms=54.92` (issue 8370) is the verify
    step's time: it becomes the verify phase, and the log's note no longer says it has no per-step times."""
    from ncclprobe.evidence.run.serverlog import load_server_logs

    runs = load_server_logs([FIX / "server_logs/vllm_0.6_v0_spec_decode_stage_times_issue8370.log"])
    (run,) = runs.runs
    assert run.mode == "speculative"
    assert run.phases["verify"].median_ms == 54.92 and run.phases["draft"].median_ms == 4.96
    assert run.phases["verify"].graphed is None  # a log cannot say
    assert "verify (scoring) 54.92 ms" in run.notes[0]
    assert not any("holds no per-step times" in n for n in run.notes)
    plain = load_server_logs([FIX / "server_logs/vllm_0.6.3_v0_speculative_metrics_issue9539.log"])
    assert plain.runs[0].phases == {} and "holds no per-step times" in plain.runs[0].notes[0]
