"""Our own loader for a local Hugging Face checkpoint of the Llama family (config.json plus
safetensors, one file or sharded with an index). Nothing is downloaded; transformers is not
needed at run time. `save_hf_checkpoint` writes the same format back (one file), so a model we
trained ourselves (`train_target.py`) is served through the same `--checkpoint` path.

Our module names follow Llama's, so loading is the checkpoint's names without the `model.`
prefix; RoPE uses the same rotate-half layout, so no weight is permuted. Refused with a one-line
reason: other architectures, attention or MLP biases, and RoPE scalings other than Llama-3's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ncclprobe.engine import safetensors_io
from ncclprobe.engine.config import ModelConfig, RopeScaling
from ncclprobe.engine.model import Transformer
from ncclprobe.errors import UsageProblem
from ncclprobe.safe_output import write_text
from ncclprobe.validate import MIB, Where, load_json

SUPPORTED_TYPES = ("llama", "mistral")


def read_config(directory: str | Path) -> ModelConfig:
    path = Path(directory) / "config.json"
    doc = Where(str(path)).object(
        load_json(path, "checkpoint config", limit=16 * MIB), "a config.json object"
    )
    # a converted GGUF names its source file (its directory is a cache entry nobody chose)
    source = doc.get("ncclprobe_source")
    return config_from_hf(
        doc, name=source if isinstance(source, str) and source else str(directory)
    )


def config_from_hf(doc: dict, name: str) -> ModelConfig:
    if doc.get("model_type") not in SUPPORTED_TYPES:
        raise UsageProblem(
            f"{name}: model_type {doc.get('model_type')!r} is not a Llama-family model "
            f"({', '.join(SUPPORTED_TYPES)})"
        )
    if doc.get("attention_bias") or doc.get("mlp_bias"):
        raise UsageProblem(f"{name}: checkpoints with attention or MLP biases are not supported")
    at = Where(name)  # every field a shape needs, checked where it is read: one line naming it
    count = lambda key, required=True: at.field(
        doc, key, "int", min=1, max=1 << 40, required=required
    )
    rope = at.field(doc, "rope_parameters", "dict", required=False) or {}
    heads = count("num_attention_heads")
    number = lambda key, default: at.field(
        doc, key, "number", min=0, required=False, default=default
    )
    return ModelConfig(
        name=name,
        vocab=count("vocab_size"),
        hidden=count("hidden_size"),
        layers=count("num_hidden_layers"),
        heads=heads,
        kv_heads=count("num_key_value_heads", False) or heads,
        intermediate=count("intermediate_size"),
        head_dim=count("head_dim", False) or 0,
        rope_theta=float(
            number("rope_theta", None)
            or Where(name)
            .at("rope_parameters")
            .field(rope, "rope_theta", "number", min=0, required=False, default=10000.0)
        ),
        rope_scaling=_rope_scaling(
            at.field(doc, "rope_scaling", "dict", required=False) or rope, name
        ),
        norm_eps=float(number("rms_norm_eps", 1e-5)),
        tie_embeddings=bool(doc.get("tie_word_embeddings", False)),
        max_positions=_positive_int(doc.get("max_position_embeddings")),
    )


def _positive_int(value) -> int | None:
    """A config.json count when it is one (some configs write null or a float); None otherwise."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _rope_scaling(doc: dict | None, name: str) -> RopeScaling | None:
    doc = doc or {}
    kind = doc.get("rope_type") or doc.get("type")
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise UsageProblem(f"{name}: RoPE scaling {kind!r} is not supported (only Llama-3's)")
    at = Where(name).at("rope_scaling")
    number = lambda key: float(at.field(doc, key, "number", min=0))
    return RopeScaling(
        factor=number("factor"),
        low_freq_factor=number("low_freq_factor"),
        high_freq_factor=number("high_freq_factor"),
        original_max_position=at.field(doc, "original_max_position_embeddings", "int", min=1),
    )


def weight_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.exists():
        doc = Where(str(index)).object(load_json(index, "weight index", limit=64 * MIB))
        weight_map = Where(str(index)).field(doc, "weight_map", "str-map")
        names = sorted(set(weight_map.values()))
        if any(
            Path(name).name != name for name in names
        ):  # weights live beside the index, nowhere else
            raise UsageProblem(f"{index}: weight_map names a file outside the checkpoint directory")
        return [directory / name for name in names]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise UsageProblem(f"{directory} holds no .safetensors weights")
    return files


def load_checkpoint(directory: str | Path, *, device, dtype) -> Transformer:
    """The checkpoint as our Transformer on `device` in `dtype`, ready for `apply_tp`."""
    directory = Path(directory)
    cfg = read_config(directory)
    with torch.device("meta"):  # no random init to overwrite: the checkpoint's tensors are assigned
        model = Transformer(cfg)
    state = {}
    for path in weight_files(directory):
        tensors, _ = safetensors_io.load(path)
        state.update(
            {
                name.removeprefix("model."): t.to(device=device, dtype=dtype)
                for name, t in tensors.items()
                if not name.endswith("rotary_emb.inv_freq")
            }
        )
    if cfg.tie_embeddings and "embed_tokens.weight" in state:  # else it is reported missing below
        state.setdefault("lm_head.weight", state["embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_embeddings:  # assigning made two parameters of one tensor: one parameter again
        model.lm_head.weight = model.embed_tokens.weight
    if missing or unexpected:
        raise UsageProblem(
            f"{directory}: weights do not match a {cfg.layers}-layer Llama: "
            f"missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
        )
    return model.eval().requires_grad_(False)


def config_to_hf(cfg: ModelConfig, max_positions: int) -> dict:
    """The config.json of a Llama checkpoint for `cfg`: every field `config_from_hf` reads, plus
    the ones transformers' LlamaConfig needs to load it."""
    if cfg.moe is not None:
        raise UsageProblem(f"{cfg.name}: MoE models cannot be saved as a Llama checkpoint")
    doc = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "tie_word_embeddings": cfg.tie_embeddings,
        "max_position_embeddings": max_positions,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
    }
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        doc["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position,
        }
    return doc


def save_hf_checkpoint(
    model: Transformer,
    directory: str | Path,
    *,
    max_positions: int,
    dtype=torch.bfloat16,
    extra_config: dict | None = None,
) -> Path:
    """Write `model` as config.json + model.safetensors (HF names: `model.` prefix, `lm_head.weight`
    without; the head omitted when tied) in `dtype`. `extra_config` keys go into config.json too
    (provenance; loaders ignore them). The directory must not hold a checkpoint already."""
    directory = Path(directory)
    if (directory / "config.json").exists() or (directory / "model.safetensors").exists():
        raise UsageProblem(f"{directory} already holds a checkpoint; choose another directory")
    if any(getattr(layer.self_attn, "qkv_proj", None) is not None for layer in model.layers):
        raise UsageProblem(
            "cannot save a model whose projections are fused (save before fuse_projections)"
        )
    doc = {
        **config_to_hf(model.cfg, max_positions),
        "torch_dtype": str(dtype).removeprefix("torch."),
        **(extra_config or {}),
    }
    tensors = {
        (name if name.startswith("lm_head.") else f"model.{name}"): t.detach().to(dtype)
        for name, t in model.state_dict().items()
        if not (model.cfg.tie_embeddings and name == "lm_head.weight")
    }
    directory.mkdir(parents=True, exist_ok=True)
    safetensors_io.save(directory / "model.safetensors", tensors, {"format": "pt"})
    write_text(
        directory / "config.json", json.dumps(doc, indent=1, allow_nan=False) + "\n"
    )  # whole or not at all
    return directory
