"""diagnose on real profiles recorded on the H200 (tests/fixtures/profiles/INDEX.md, "h200/"): the seed
case of our own engine (`--graphs decode`: decode captured, verify launched kernel by kernel), its
healthy twin (`--graphs all`), and Hugging Face assisted generation, a speculative engine nobody here
wrote. Recorded with examples/record_profiles.py; figures in docs/LOG.md (2026-12-01)."""

from pathlib import Path

from ncclprobe.diagnose import diagnose, load_evidence

H200 = Path(__file__).parent / "fixtures" / "profiles" / "h200"


def _diagnose(profile: str, baseline: str):
    ev = load_evidence(profiles=[H200 / profile], baseline_profiles=[H200 / baseline])
    return ev, diagnose(ev)


def test_seed_case_on_the_h200_names_the_eager_verify_with_its_cost_and_rules_nccl_out():
    ev, result = _diagnose(
        "engine_small_graphs_decode_speculative_trimmed.json.gz",
        "engine_small_graphs_decode_baseline.json.gz",
    )
    verify, decode = ev.runs[0].phases["verify"], ev.baseline[0].phases["decode"]
    assert verify.graphed is False and verify.tokens_per_seq == 4.0 and decode.graphed is True
    assert 15 < verify.median_ms / decode.median_ms < 20  # 22.4 ms against 1.44 ms, as recorded
    top = result.top
    assert (top.rule, top.severity, top.evidence["phase"]) == ("eager-phase", "error", "verify")
    assert 20 < top.cost_ms_per_step < verify.median_ms  # the GPU idled 21.1 ms of each step
    assert any(r.rule == "nccl-settings" for r in result.ruled_out)
    assert result.verdict().exit_code == 1


def test_its_healthy_twin_graphs_all_has_nothing_above_informational():
    ev, result = _diagnose(
        "engine_small_graphs_all_speculative.json.gz", "engine_small_graphs_all_baseline.json.gz"
    )
    assert ev.runs[0].phases["verify"].graphed is True
    assert not result.actionable(), [f.title for f in result.findings]
    assert "eager-phase" in [r.rule for r in result.ruled_out]
    assert result.verdict().exit_code == 0


def test_hf_assisted_generation_is_seen_as_verify_steps_launched_kernel_by_kernel():
    ev, result = _diagnose(
        "hf_generate_assisted_trimmed.json.gz", "hf_generate_static_compiled.json.gz"
    )
    verify = ev.runs[0].phases["verify"]
    assert (
        verify.graphed is False
        and verify.tokens_per_seq == 2.0
        and verify.idle_ms > 0.9 * verify.median_ms
    )
    assert (result.top.rule, result.top.evidence["phase"]) == ("host-bound", "verify")
    # transformers' static cache with torch.compile replayed no CUDA graph here: nothing to compare against
    assert all(not p.graphed for p in ev.baseline[0].phases.values())
