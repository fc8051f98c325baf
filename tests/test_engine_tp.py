"""Tensor parallelism over 2 real gloo ranks (worker processes of the launcher): sharded logits
against the unsharded model, and greedy speculative output against the baseline."""

import pytest
import torch

from ncclprobe.engine.build import build_target, random_prompts
from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.config import preset
from ncclprobe.engine.spec import RunSpec
from ncclprobe.engine.tp import apply_tp
from ncclprobe.errors import UsageProblem
from ncclprobe.launch import PoolSpec, run_pool
from tests.test_engine_draft import trained_tiny_draft, trained_tiny_moe_draft  # noqa: F401  (fixtures)

# Sharded float32 differs from unsharded only in summation order: each all-reduce adds two partial
# sums of ~hidden/2 products instead of one sum of all of them. Relative rounding per layer is a few
# float32 ulps (1e-7) times the terms' magnitude; over 4 layers and logits of magnitude < 10 that
# stays far below 1e-4, while any sharding mistake (wrong slice, missing reduce) is O(1).
TP_ATOL = 1e-4


def tp_logits_entry(ctx):
    """Each rank: full-model logits, then its shard's logits after the all-reduces; report both."""
    torch.set_num_threads(1)
    comm = Communicator.from_default_group()
    for name in ctx.payload["presets"]:
        tokens = random_prompts(256, 2, 12, seed=1, device="cpu")
        positions = torch.arange(12).expand(2, 12)
        full = build_target(preset(name), seed=0, device="cpu", dtype=torch.float32)
        full.setup_caches(2, 16)
        expected, expected_features = full(tokens, positions, capture=True)
        sharded = apply_tp(
            build_target(preset(name), seed=0, device="cpu", dtype=torch.float32), comm
        )
        sharded.setup_caches(2, 16)
        got, features = sharded(tokens, positions, capture=True)
        ctx.emit(
            "tp-logits",
            preset=name,
            max_abs_diff=float((got - expected).abs().max()),
            feature_diff=float((features - expected_features).abs().max()),
            magnitude=float(expected.abs().max()),
        )


def test_tp2_logits_match_tp1():
    outcome = run_pool(
        PoolSpec(
            nranks=2,
            backend="gloo",
            entry="tests.test_engine_tp:tp_logits_entry",
            payload={"presets": ["tiny", "tiny-moe"]},
            timeout_s=120,
        )
    )
    assert outcome.status == "ok", outcome.reason
    reports = outcome.of_kind("tp-logits")
    assert len(reports) == 4
    for report in reports:
        assert 0.1 < report["magnitude"] < 10  # not trivially zero; the range TP_ATOL assumes
        assert report["max_abs_diff"] < TP_ATOL, report
        assert report["feature_diff"] < TP_ATOL, report


def test_tp_refuses_indivisible_heads():
    model = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
    with pytest.raises(UsageProblem, match="divisible by 3"):
        apply_tp(
            model, Communicator(rank=0, world_size=3)
        )  # sharding is checked before any collective


def test_tp2_greedy_speculative_equals_baseline(trained_tiny_draft, trained_tiny_moe_draft):
    """Several configurations in one 2-rank pool: dense and MoE, batch 1 and 3, k 1/3/5, draft
    replicated or tensor-parallel, untrained and trained draft (each model with both drafts, each
    k and each batch at least once per model; the full cross product runs at TP=1)."""
    cases = [
        dict(preset="tiny", batch=1, k=3),
        dict(preset="tiny", batch=3, k=5, draft=str(trained_tiny_draft), draft_tp=True),
        dict(preset="tiny", batch=3, k=1, draft=str(trained_tiny_draft)),
        dict(preset="tiny-moe", batch=3, k=3, draft_tp=True),
        dict(preset="tiny-moe", batch=1, k=5),
        dict(preset="tiny-moe", batch=3, k=1, draft=str(trained_tiny_moe_draft), draft_tp=True),
    ]
    jobs = [
        RunSpec(
            tp=2, prompt_len=8, new_tokens=20, warmup_tokens=0, measure_share=False, **case
        ).to_json()
        for case in cases
    ]
    outcome = run_pool(
        PoolSpec(
            nranks=2,
            backend="gloo",
            entry="ncclprobe.engine.worker:run_jobs",
            payload={"jobs": jobs},
            timeout_s=120,
        )
    )
    assert outcome.status == "ok", outcome.reason
    runs = outcome.of_kind("engine-run")
    assert len(runs) == 2 * len(cases)
    for job in range(len(cases)):
        modes = {r["mode"]: r for r in runs if r["job"] == job}
        assert modes["speculative"]["tokens"] == modes["baseline"]["tokens"], cases[job]
        assert all(len(seq) == 20 for seq in modes["baseline"]["tokens"])
        digests = {
            (m["rank"], m["mode"]): m["digest"]
            for m in outcome.of_kind("engine-digest")
            if m["job"] == job
        }
        assert (
            digests[(0, "speculative")] == digests[(1, "speculative")]
        )  # ranks agree token for token
    trained = {r["job"]: r["mean_acceptance_length"] for r in runs if r["mode"] == "speculative"}
    assert (
        trained[1] > 1.0 or trained[2] > 1.0
    )  # the trained draft gets drafts accepted under TP too
    assert trained[5] > 1.0  # and so does the MoE target's trained draft
