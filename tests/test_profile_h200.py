"""diagnose on real profiles recorded on the H200 (tests/fixtures/profiles/INDEX.md, "h200/"): the seed
case of our own engine (`--graphs decode`: decode captured, verify launched kernel by kernel), its
healthy twin (`--graphs all`), and Hugging Face assisted generation, a speculative engine nobody here
wrote. Recorded with examples/record_profiles.py; figures in docs/LOG.md (2026-12-01)."""

from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence

# the shipped traces this module diagnoses are parsed once per session (conftest.py)
pytestmark = pytest.mark.usefixtures("shared_timelines")

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
    # the GPU idled 21.1 ms of each verify step; the trace holds no acceptance, so the cost is per
    # speculative cycle (one verify each), never per token, and profiled: up to 2.3x inflated
    assert 20 < top.evidence["phases"]["verify"]["cost_ms_per_step"] < verify.median_ms
    assert top.cost.unit == "cycle" and top.cost.kind == "profiled"
    assert top.cost.low == pytest.approx(top.cost.high / 2.3) and "per token unknown" in top.title
    assert any(r.rule == "nccl-settings" for r in result.ruled_out)
    assert result.verdict().exit_code == 1


def test_its_healthy_twin_graphs_all_has_nothing_above_warning():
    """Every step replayed: no eager finding and no error. What is left is the host's work around
    each verify replay (3 eager kernels, 31% of the step), reported as what it is, a warning."""
    ev, result = _diagnose(
        "engine_small_graphs_all_speculative.json.gz", "engine_small_graphs_all_baseline.json.gz"
    )
    assert ev.runs[0].phases["verify"].graphed is True
    assert all(f.severity != "error" for f in result.findings), [f.title for f in result.findings]
    assert [f.rule for f in result.actionable()] == ["graph-glue"]
    assert result.actionable()[0].evidence["phase"] == "verify"
    assert "eager-phase" in [r.rule for r in result.ruled_out]


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


def _without_our_annotations(name: str, tmp_path):
    """Edit: the recorded trace with every `ncclprobe::<phase>` annotation removed, as if an engine
    nobody here wrote had made it; nothing else changes."""
    import gzip
    import json

    doc = json.loads(gzip.decompress((H200 / name).read_bytes()))
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ncclprobe::")
    ]
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_our_engine_without_its_annotations_gives_the_same_steps(tmp_path):
    """The kernel stream alone finds the steps our engine annotated: one per forward (the prompt's
    target and draft prefills are two forwards under one annotation), decode and graph-replayed
    decode alike, verify of k+1 = 4 tokens from the launch grids; the trimmed trace's last verify,
    cut by the trim, is not counted."""
    from ncclprobe.evidence.run import load_runs

    for name, expected in (
        ("engine_small_graphs_decode_baseline.json.gz", {"prefill": 1, "decode": 23}),
        ("engine_small_graphs_all_baseline.json.gz", {"prefill": 1, "decode": 23}),
    ):
        annotated = load_runs(profiles=[H200 / name]).runs[0]
        assert {n: p.count for n, p in annotated.phases.items()} == expected
        found = load_runs(profiles=[_without_our_annotations(name, tmp_path)]).runs[0]
        assert {n: p.count for n, p in found.phases.items()} == expected, name
    name = "engine_small_graphs_decode_speculative_trimmed.json.gz"
    annotated = load_runs(profiles=[H200 / name]).runs[0]
    found = load_runs(profiles=[_without_our_annotations(name, tmp_path)]).runs[0]
    assert found.phases["verify"].count == annotated.phases["verify"].count - 1 == 11
    assert found.phases["verify"].tokens_per_seq == 4.0 and found.phases["verify"].graphed is False
    assert (found.phases["prefill"].count, found.phases["draft prefill"].count) == (1, 1)
