"""Our Hugging Face loader against transformers' own LlamaForCausalLM on a tiny random model."""

import pytest
import torch

from ncclprobe.engine.hf_loader import load_checkpoint, read_config
from ncclprobe.errors import UsageProblem

transformers = pytest.importorskip("transformers")


def _save_tiny_llama(directory, **overrides):
    settings = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    settings.update(overrides)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**settings)).eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_word_embeddings": True},
        {
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
            "rope_theta": 500000.0,
        },
    ],
    ids=["plain", "tied", "llama3-rope"],
)
def test_logits_match_transformers(tmp_path, overrides):
    reference = _save_tiny_llama(tmp_path, **overrides)
    ours = load_checkpoint(tmp_path, device="cpu", dtype=torch.float32)
    ours.setup_caches(batch=2, max_seq=32)
    tokens = torch.randint(0, 128, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(tokens).logits
        got, _ = ours(tokens, torch.arange(20).expand(2, 20))
    # float32 end to end, same operations in a different order: differences are rounding (~1e-6)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_incremental_decode_matches_full_forward(tmp_path):
    """The KV cache path (prefill then one token at a time) gives transformers' full-sequence logits."""
    reference = _save_tiny_llama(tmp_path)
    ours = load_checkpoint(tmp_path, device="cpu", dtype=torch.float32)
    ours.setup_caches(batch=1, max_seq=32)
    tokens = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = reference(tokens).logits
        ours(tokens[:, :8], torch.arange(8)[None])
        steps = [ours(tokens[:, i : i + 1], torch.tensor([[i]]))[0] for i in range(8, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected[:, 8:], atol=1e-4, rtol=1e-4)


def test_refuses_other_architectures(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(UsageProblem, match="not a Llama-family"):
        read_config(tmp_path)


def test_a_tied_checkpoint_without_its_embedding_is_named_not_a_traceback(tmp_path):
    """The tied head is the embedding: without one, both are missing (it used to assign None to the
    head, and load_state_dict raised a RuntimeError)."""
    from ncclprobe.engine import safetensors_io

    _save_tiny_llama(tmp_path, tie_word_embeddings=True, num_hidden_layers=1)
    (path,) = tmp_path.glob("*.safetensors")
    tensors, metadata = safetensors_io.load(path)
    kept = {name: t for name, t in tensors.items() if "embed_tokens" not in name}
    safetensors_io.save(path, kept, metadata, replace=True)
    with pytest.raises(UsageProblem, match="missing .*embed_tokens.weight"):
        load_checkpoint(tmp_path, device="cpu", dtype=torch.float32)
