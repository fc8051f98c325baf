"""The speculative loop at TP=1 (greedy output equals target-only greedy output, token for token,
over dense/MoE x batch 1/3 x k 1/3/5 x untrained/trained draft) and draft training (its loss falls
and its acceptance rises on `tiny`)."""

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from ncclprobe.engine.build import build_draft, build_target, random_prompts
from ncclprobe.engine.config import preset
from ncclprobe.engine.draft import load_draft, save_draft
from ncclprobe.engine.generate import Engine
from ncclprobe.engine.limits import max_positions
from ncclprobe.engine.train_draft import TrainSpec, train
from ncclprobe.errors import UsageProblem

TEST_TRAINING = TrainSpec(
    sequences=40,
    prompt_len=8,
    gen_len=40,
    steps=100,
    batch=16,
    lr=3e-3,
    unroll=3,
    eval_prompts=3,
    eval_k=3,
)
# tiny-moe's draft needs only to get some drafts accepted (so greedy equality is tested through the
# accept-and-extend path of an MoE target, not only through rejections): a lighter run does that
# (acceptance length 1.0 -> 1.37) at half the cost; MoE on CPU is slow to generate training data
MOE_TEST_TRAINING = TrainSpec(
    sequences=16,
    prompt_len=8,
    gen_len=24,
    steps=40,
    batch=16,
    lr=3e-3,
    unroll=3,
    eval_prompts=3,
    eval_k=3,
)


@functools.cache
def _trained(name: str) -> tuple[Path, dict]:
    """Train a draft for preset `name` once per test session; (file, training report)."""
    torch.manual_seed(0)
    target = build_target(preset(name), seed=0, device="cpu", dtype=torch.float32)
    draft = build_draft(target, seed=0)
    report = train(target, draft, MOE_TEST_TRAINING if preset(name).moe else TEST_TRAINING)
    folder = tempfile.mkdtemp(prefix="ncclprobe-draft-")
    atexit.register(
        shutil.rmtree, folder, ignore_errors=True
    )  # cached for the session, removed after it
    path = Path(folder) / f"{name}.safetensors"
    save_draft(draft, path, {"training": report})
    return path, report


@pytest.fixture
def trained_tiny_draft() -> Path:
    return _trained("tiny")[0]


@pytest.fixture
def trained_tiny_moe_draft() -> Path:
    return _trained("tiny-moe")[0]


def test_training_lowers_loss_and_raises_acceptance():
    report = _trained("tiny")[1]
    assert report["loss_last"] < report["loss_first"] - 0.1, report
    assert report["acceptance_length_before"] < 1.1, report  # untrained: almost nothing
    assert report["acceptance_length_after"] > report["acceptance_length_before"] + 0.3, report


def test_saved_draft_loads_with_eagle_names_and_same_weights(trained_tiny_draft):
    from ncclprobe.engine import safetensors_io

    tensors, _ = safetensors_io.load(trained_tiny_draft)
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "lm_head.weight", "d2t"} <= set(
        tensors
    )
    target = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
    draft = load_draft(trained_tiny_draft, target.embed_tokens, 256, 64)
    assert torch.equal(draft.fc.weight, tensors["fc.weight"])
    assert tensors["midlayer.self_attn.q_proj.weight"].shape == (64, 128)  # 2H attention input


def _generate_both(name, batch, k, draft_path):
    target = build_target(preset(name), seed=0, device="cpu", dtype=torch.float32)
    draft = build_draft(target, seed=0, path=str(draft_path) if draft_path else None)
    max_seq = max_positions(8, 24, k)
    target.setup_caches(batch, max_seq)
    draft.setup_caches(batch, max_seq)
    prompts = random_prompts(256, batch, 8, seed=batch * 10 + k, device="cpu")
    engine = Engine(target, draft, k=k)
    return engine.baseline(prompts, 24), engine.speculative(prompts, 24)


@pytest.mark.parametrize(
    "name, trained", [("tiny", False), ("tiny", True), ("tiny-moe", False), ("tiny-moe", True)]
)
def test_greedy_speculative_equals_baseline_tp1(name, trained):
    draft_path = _trained(name)[0] if trained else None
    accepted_any = 0
    for batch in (1, 3):
        for k in (1, 3, 5):
            baseline, speculative = _generate_both(name, batch, k, draft_path)
            assert speculative.tokens == baseline.tokens, (name, batch, k, trained)
            assert all(len(seq) == 24 for seq in speculative.tokens)
            assert sum(speculative.histogram) >= batch * 24 // (k + 1)
            accepted_any += sum(speculative.histogram[1:])
    if trained:
        assert accepted_any > 0  # the accept-and-extend path really ran with accepted drafts


def test_caches_larger_than_the_batch_give_the_same_tokens():
    """A capture list allocates the KV caches for its largest batch size; a step at a smaller
    batch uses the caches' first rows and must produce exactly the tokens of right-sized caches."""

    def generate(cache_batch):
        target = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
        draft = build_draft(target, seed=0)
        target.setup_caches(cache_batch, max_positions(8, 16, 3))
        draft.setup_caches(cache_batch, max_positions(8, 16, 3))
        engine = Engine(target, draft, k=3)
        prompts = random_prompts(256, 2, 8, seed=5, device="cpu")
        return engine.baseline(prompts, 16).tokens, engine.speculative(prompts, 16).tokens

    exact, larger = generate(2), generate(5)
    assert (
        larger == exact and exact[0] == exact[1]
    )  # baseline == speculative (greedy), caches of 5 == of 2


def test_reduced_draft_vocabulary_holds_the_most_generated_tokens():
    """choose_vocabulary: the draft's head gets the tokens the target generated most (prompts not
    counted), in id order, through d2t; positions whose greedy token is outside get no hard label."""
    from ncclprobe.engine.distill_data import draft_labels
    from ncclprobe.engine.train_draft import choose_vocabulary

    target = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
    draft = build_draft(target, seed=0, vocab=3)
    prompt = torch.tensor([[200, 200, 200, 200]])  # frequent, but a prompt: not counted
    generated = torch.tensor([[9, 9, 9, 9, 5, 5, 5, 7, 7, 1]])
    coverage = choose_vocabulary(draft, torch.cat([prompt, generated], dim=1), prompt_len=4)
    assert draft.to_target(torch.arange(3)).tolist() == [5, 7, 9] and coverage == pytest.approx(0.9)
    probs = torch.zeros(1, 2, 256)
    probs[0, 0, 7], probs[0, 1, 1] = 1.0, 1.0  # greedy 7 (in the head), then 1 (not)
    in_head, greedy = draft_labels(draft, probs)
    assert in_head.shape == (1, 2, 3) and in_head[0, 0].tolist() == [0.0, 1.0, 0.0]
    assert greedy.tolist() == [[1, -1]]


def test_draft_with_a_reduced_vocabulary_trains_saves_and_keeps_greedy_output():
    """Trained with half the target's vocabulary, saved and loaded back (its d2t map included),
    the draft still only proposes: greedy speculative output equals the baseline's."""
    target = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
    draft = build_draft(target, seed=0, vocab=128)
    spec = TrainSpec(
        sequences=16,
        prompt_len=8,
        gen_len=24,
        steps=20,
        batch=16,
        eval_prompts=2,
        eval_k=3,
        draft_vocab=128,
    )
    with pytest.raises(
        UsageProblem, match="asks for a 128-token draft vocabulary, the draft has 256"
    ):
        train(target, build_draft(target, seed=0), spec)
    report = train(target, draft, spec)
    assert report["draft_vocab"] == 128 and 0.5 < report["draft_vocab_coverage"] <= 1.0
    path = Path(tempfile.mkdtemp(prefix="ncclprobe-draft-")) / "d.safetensors"
    atexit.register(shutil.rmtree, path.parent, ignore_errors=True)
    save_draft(draft, path, {"training": report})
    loaded = load_draft(path, target.embed_tokens, 256, 64)
    assert loaded.cfg.vocab == 128 and torch.equal(loaded.d2t, draft.d2t) and loaded.d2t.any()
    baseline, speculative = _generate_both("tiny", 2, 3, path)
    assert speculative.tokens == baseline.tokens
