"""The synthetic-corpus target (engine/synthetic_corpus.py, engine/train_target.py): the training
forward is the engine's forward, the HF checkpoint round-trips exactly, the chain samples what it
specifies, and a short training run learns."""

import json
import math

import pytest
import torch

from ncclprobe.engine.build import build_target
from ncclprobe.engine.config import ModelConfig, RopeScaling, preset
from ncclprobe.engine.hf_loader import load_checkpoint, read_config, save_hf_checkpoint
from ncclprobe.engine.synthetic_corpus import ChainSpec, MarkovChain, greedy_walk
from ncclprobe.engine.train_target import (
    TargetTrainSpec,
    build_trainable,
    evaluate,
    train_target,
    training_logits,
)
from ncclprobe.errors import UsageProblem

SCALED = ModelConfig(
    name="scaled",
    vocab=96,
    hidden=48,
    layers=2,
    heads=6,
    kv_heads=2,
    intermediate=80,
    head_dim=12,
    tie_embeddings=True,
    rope_theta=500000.0,
    capture_layers=(0, 1, 1),
    rope_scaling=RopeScaling(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=16
    ),
)


def _engine_logits(model, tokens):
    model.setup_caches(tokens.shape[0], tokens.shape[1] + 4)
    with torch.no_grad():
        return model(tokens, torch.arange(tokens.shape[1]).expand_as(tokens))[0]


@pytest.mark.parametrize("cfg", [preset("tiny"), SCALED], ids=["tiny", "tied-head_dim-llama3rope"])
def test_training_forward_equals_engine_forward(cfg):
    model = build_target(cfg, seed=1, device="cpu", dtype=torch.float32)
    tokens = torch.randint(0, cfg.vocab, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = training_logits(model, tokens)
    torch.testing.assert_close(got, _engine_logits(model, tokens), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cfg", [preset("tiny"), SCALED], ids=["tiny", "tied-head_dim-llama3rope"])
def test_checkpoint_round_trip_is_exact(tmp_path, cfg):
    model = build_target(cfg, seed=2, device="cpu", dtype=torch.float32)
    save_hf_checkpoint(model, tmp_path / "f32", max_positions=64, dtype=torch.float32)
    save_hf_checkpoint(
        model, tmp_path / "bf16", max_positions=64
    )  # the default: bf16, as HF ships them
    tokens = torch.randint(0, cfg.vocab, (2, 24), generator=torch.Generator().manual_seed(4))
    loaded = load_checkpoint(tmp_path / "f32", device="cpu", dtype=torch.float32)
    assert torch.equal(_engine_logits(loaded, tokens), _engine_logits(model, tokens))
    rounded = build_target(cfg, seed=2, device="cpu", dtype=torch.float32)
    rounded.load_state_dict(
        {k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()}
    )
    loaded = load_checkpoint(tmp_path / "bf16", device="cpu", dtype=torch.float32)
    assert torch.equal(_engine_logits(loaded, tokens), _engine_logits(rounded, tokens))
    again = read_config(tmp_path / "bf16")
    assert (
        again.max_positions == 64
    )  # the context the file declares (max_position_embeddings), a save choice
    assert {**again.to_json(), "name": cfg.name} == cfg.to_json() | {
        "capture_layers": again.capture_layers,
        "max_positions": 64,
    }


def test_checkpoint_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = build_target(preset("tiny"), seed=5, device="cpu", dtype=torch.float32)
    save_hf_checkpoint(model, tmp_path, max_positions=64, dtype=torch.float32)
    reference = transformers.LlamaForCausalLM.from_pretrained(
        tmp_path, torch_dtype=torch.float32
    ).eval()
    tokens = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = reference(tokens).logits
    torch.testing.assert_close(_engine_logits(model, tokens), expected, atol=1e-4, rtol=1e-4)


def test_saving_refuses_moe_and_existing_checkpoints(tmp_path):
    with pytest.raises(UsageProblem, match="dense models only"):
        build_trainable(preset("tiny-moe"), seed=0, device="cpu")
    moe = build_target(preset("tiny-moe"), seed=0, device="cpu", dtype=torch.float32)
    with pytest.raises(UsageProblem, match="MoE"):
        save_hf_checkpoint(moe, tmp_path / "moe", max_positions=64)
    dense = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
    save_hf_checkpoint(dense, tmp_path / "dense", max_positions=64)
    with pytest.raises(UsageProblem, match="already holds"):
        save_hf_checkpoint(dense, tmp_path / "dense", max_positions=64)


def test_corpus_is_deterministic_and_opens_with_a_random_prefix():
    chain = MarkovChain(ChainSpec(vocab=256, active_vocab=32, prefix_min=3, prefix_max=9, seed=7))

    def draw(seed):
        return chain.sample(64, 40, torch.Generator().manual_seed(seed))

    (tokens, ruled), (again, ruled_again) = draw(1), draw(1)
    assert torch.equal(tokens, again) and torch.equal(ruled, ruled_again)
    assert not torch.equal(tokens, draw(2)[0])
    assert not torch.equal(
        tokens,
        MarkovChain(
            ChainSpec(vocab=256, active_vocab=32, prefix_min=3, prefix_max=9, seed=8)
        ).sample(64, 40, torch.Generator().manual_seed(1))[0],
    )
    prefix = (~ruled).sum(1)
    assert prefix.min() >= 3 and prefix.max() <= 9 and len(set(prefix.tolist())) > 3
    assert torch.equal(
        ruled, torch.arange(40)[None, :] >= prefix[:, None]
    )  # one prefix, then the chain
    assert torch.isin(tokens[ruled], chain.active).all()
    assert (
        ~torch.isin(tokens[~ruled], chain.active)
    ).float().mean() > 0.7  # prefix: the full vocabulary


@pytest.mark.parametrize(
    "bad",
    [
        dict(active_vocab=2),
        dict(active_vocab=300),
        dict(successors=5, top_prob=0.2),
        dict(successors=3, top_prob=1.0),
        dict(prefix_min=1),
        dict(prefix_min=9, prefix_max=8),
    ],
)
def test_bad_chain_settings_are_usage_problems(bad):
    with pytest.raises(UsageProblem):
        ChainSpec(vocab=256, **bad)


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_successor_frequencies_match_the_specified_probabilities():
    """20000 draws per context: chi-square below the 0.1% critical value (df 4: 18.5; df 31: 61.1)."""
    spec = ChainSpec(vocab=256, active_vocab=32, successors=5, top_prob=0.7, seed=3)
    chain = MarkovChain(spec)
    gen = torch.Generator().manual_seed(0)
    outside = torch.tensor([t for t in range(256) if t not in set(chain.active.tolist())][:1])
    active = chain.active
    for a, b in [(active[0], active[1]), (active[5], active[5]), (active[31], active[2])]:
        a, b = a.expand(20000), b.expand(20000)
        drawn = chain.sample_next(a, b, gen)
        successors = chain.active[(chain._context(a[:1], b[:1])[0] + chain.offsets) % 32]
        assert len(set(successors.tolist())) == 5 and successors[0] == chain.top(a[:1], b[:1])[0]
        assert successors[0] not in (a[0], b[0])  # greedy never repeats the context
        assert torch.isin(drawn, successors).all()
        counts = torch.stack([(drawn == s).sum() for s in successors]).double()
        assert _chi_square(counts, chain.probs) < 18.5
    for a, b in [
        (outside, active[3]),
        (active[3], outside),
    ]:  # a chain start: uniform over the active
        drawn = chain.sample_next(a.expand(20000), b.expand(20000), gen)
        counts = torch.stack([(drawn == s).sum() for s in active]).double()
        assert _chi_square(counts, torch.full((32,), 1 / 32, dtype=torch.float64)) < 61.1
        assert chain.top(a, b)[0] == -1 and math.isclose(
            float(chain.entropy(a, b)[0]), math.log(32), rel_tol=1e-6
        )
    assert math.isclose(
        chain.chain_entropy, -(0.7 * math.log(0.7) + 4 * 0.075 * math.log(0.075)), rel_tol=1e-9
    )


def test_greedy_walk_matches_iterating_the_map():
    chain = MarkovChain(ChainSpec(vocab=64, active_vocab=12, seed=1))
    walk = greedy_walk(chain)
    assert math.isclose(sum(c["share"] for c in walk["cycles"]), 1.0, abs_tol=1e-3)
    a, b = chain.active.repeat_interleave(12), chain.active.repeat(12)
    for _ in range(144):  # past every tail: all states now sit on their cycles
        a, b = b, chain.top(a, b)
    lengths = []
    for state in set(zip(a.tolist(), b.tolist())):
        x, y, n = *state, 0
        while True:
            x, y, n = y, int(chain.top(torch.tensor(x), torch.tensor(y))), n + 1
            if (x, y) == state:
                break
        lengths.append(n)
    assert sorted(set(lengths)) == sorted(c["length"] for c in walk["cycles"])


def test_short_training_moves_the_loss_towards_the_chain_entropy():
    spec = TargetTrainSpec(
        steps=60, batch=16, seq_len=48, lr=5e-3, warmup=5, active_vocab=16, eval_batch=16
    )
    torch.manual_seed(0)
    model = build_trainable(preset("tiny"), seed=0, device="cpu")
    before = evaluate(model, MarkovChain(spec.chain(256)), spec)
    report = train_target(model, spec)
    assert report["entropy_bound"] < report["eval_loss"]  # the floor is a floor
    assert report["eval_loss"] < before["eval_loss"] - 0.6 * (
        before["eval_loss"] - before["entropy_bound"]
    )
    assert report["argmax_agreement"] > before["argmax_agreement"] + 0.2


def test_train_target_command_trains_saves_and_checks(tmp_path):
    from click.testing import CliRunner

    from ncclprobe.cli import cli

    out = tmp_path / "ckpt"
    args = [
        "train-target",
        "--preset",
        "tiny",
        "--output",
        str(out),
        "--device",
        "cpu",
        "--steps",
        "3",
        "--batch",
        "4",
        "--seq-len",
        "40",
        "--check-prompts",
        "2",
        "--check-tokens",
        "8",
        "--format",
        "json",
        "-q",
    ]
    result = CliRunner().invoke(cli, args, prog_name="ncclprobe")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (
        doc["steps"] == 3
        and 0 <= doc["greedy_agreement_random_prompts"] <= 1
        and "synthetic" in doc["label"]
    )
    config = json.loads((out / "config.json").read_text())
    assert (
        config["max_position_embeddings"] == 40
        and config["ncclprobe_synthetic_target"]["steps"] == 3
    )
    again = CliRunner().invoke(
        cli, args, prog_name="ncclprobe"
    )  # a checkpoint is never replaced without --force
    assert again.exit_code == 2 and "--force" in again.output
