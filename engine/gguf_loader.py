"""A llama.cpp GGUF file as a Llama checkpoint directory our loader reads (`hf_loader`).

Read through the `gguf` package (llama.cpp's own reader, `pip install 'ncclprobe[gguf]'`), which
also dequantizes: every quantized tensor becomes float32, exactly the values llama.cpp computes
from its blocks (Q4_1: scale x 4-bit code + minimum, per block of 32), so the logits are those of
the quantized model, not of the original float weights. `conversion["dequantized"]` names which
weights came from which GGUF type (SmolLM2-135M-Instruct.Q4_1: every projection of the 30 blocks
from Q4_1, the token embedding, which is also the tied output head, from Q8_0; the norms are
stored as float32).

llama.cpp's converter permutes the rows of the query and key projections so that RoPE rotates
adjacent pairs (GGML's "normal" rotary); our model, like Hugging Face's, rotates the two halves of
each head. `unpermute_rotary` reverses it, per head, as transformers' GGUF loader does.

The directory written (`convert_gguf`) is a Hugging Face Llama checkpoint: config.json,
model.safetensors (float32, so no dequantized value is rounded again), tokenizer.json and
tokenizer_config.json built from the GGUF metadata (`gguf_tokenizer.py`), and the conversion record.
`cached_checkpoint` converts once per file into a cache directory, so every TP rank loads plain
float tensors (about 0.5 s for 135M weights) instead of parsing and dequantizing the GGUF (3-5 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

from ncclprobe import envvars
from ncclprobe.engine import safetensors_io
from ncclprobe.engine.gguf_tokenizer import field, write_tokenizer
from ncclprobe.errors import UsageProblem

CONVERSION_FILE = "ncclprobe_conversion.json"
CONVERSION_VERSION = 1  # bump when the converted layout changes: old cache entries are redone
INSTALL_HINT = "pip install 'ncclprobe[gguf]'"

# GGUF tensor names (llama.cpp's `llama` architecture) -> Hugging Face Llama names
_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def is_gguf(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".gguf"


def open_reader(path: str | Path):
    """llama.cpp's reader over the file (memory-mapped), or a one-line reason it cannot be read."""
    try:
        import gguf
    except ImportError:
        raise UsageProblem(f"reading {path} needs the gguf package: {INSTALL_HINT}") from None
    try:
        return gguf.GGUFReader(str(path))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise UsageProblem(f"{path} is not a readable GGUF file: {exc}") from None


def hf_config(reader, path) -> dict:
    """The config.json of the Llama that the file's metadata describes; refuses what our model
    cannot run exactly (another architecture, MoE, partial or scaled RoPE) with the reason."""
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise UsageProblem(f"{path}: GGUF architecture {arch!r} is not supported (only llama)")
    get = lambda key, default=None: field(reader, f"llama.{key}", default)  # noqa: E731
    if get("expert_count"):
        raise UsageProblem(f"{path}: mixture-of-experts GGUF files are not supported")
    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    head_dim = int(get("attention.key_length", hidden // heads))
    if int(get("rope.dimension_count", head_dim)) != head_dim:
        raise UsageProblem(f"{path}: RoPE over part of each head is not supported")
    scaling = get("rope.scaling.type")
    names = {t.name for t in reader.tensors}
    if scaling not in (None, "none") or "rope_freqs.weight" in names:
        raise UsageProblem(f"{path}: RoPE scaling ({scaling or 'rope_freqs'}) is not supported")
    vocab = get("vocab_size") or len(reader.fields["tokenizer.ggml.tokens"].data)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "intermediate_size": int(get("feed_forward_length")),
        "hidden_act": "silu",
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(get("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }


def hf_name(name: str, path) -> str:
    if name in _GLOBAL:
        return _GLOBAL[name]
    match = _BLOCK_NAME.fullmatch(name)
    if not match or match.group(2) not in _BLOCK:
        raise UsageProblem(f"{path}: tensor {name} has no place in a Llama model")
    return f"model.layers.{match.group(1)}.{_BLOCK[match.group(2)]}.weight"


def unpermute_rotary(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's `permute` of a query/key projection ([heads x head_dim, in]): within each
    head it interleaved the two halves (rows 0, D/2, 1, D/2+1, ...); put them back in halves."""
    out_features = weight.shape[0]
    return (
        weight.reshape(heads, out_features // heads // 2, 2, -1)
        .transpose(1, 2)
        .reshape(weight.shape)
    )


def read_weights(reader, config: dict, path) -> tuple[dict[str, torch.Tensor], dict]:
    """(float32 tensors under Hugging Face names, the conversion record: which GGUF type each of
    our weight kinds came from)."""
    import gguf
    import numpy as np

    tensors, kinds = {}, defaultdict(set)
    heads = {
        "self_attn.q_proj": config["num_attention_heads"],
        "self_attn.k_proj": config["num_key_value_heads"],
    }
    for tensor in reader.tensors:
        name = hf_name(tensor.name, path)
        try:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError as exc:
            raise UsageProblem(
                f"{path}: cannot dequantize {tensor.name} ({tensor.tensor_type.name}): {exc}"
            ) from None
        weight = torch.from_numpy(np.array(values, dtype=np.float32, copy=True))
        kind = (
            name.removeprefix("model.").split(".", 2)[-1].removesuffix(".weight")
            if ".layers." in name
            else name.removeprefix("model.").removesuffix(".weight")
        )
        if kind in heads:
            weight = unpermute_rotary(weight, heads[kind])
        tensors[name] = weight
        kinds[tensor.tensor_type.name].add(
            kind
            + (
                " (tied output head)"
                if kind == "embed_tokens" and config["tie_word_embeddings"]
                else ""
            )
        )
    counts: defaultdict[str, int] = defaultdict(int)
    for tensor in reader.tensors:
        counts[tensor.tensor_type.name] += 1
    record = {
        "format": "gguf",
        "source": str(path),
        "file_name": Path(path).name,
        "model_name": field(reader, "general.name"),
        "license": field(reader, "general.license"),
        "dequantized_to": "float32",
        "tensor_types": {
            kind: {"tensors": counts[kind], "weights": sorted(names)}
            for kind, names in sorted(kinds.items())
        },
    }
    return tensors, record


def convert_gguf(path: str | Path, directory: str | Path) -> Path:
    """Write the Llama checkpoint of GGUF `path` into `directory` (which must not exist): built in
    a temporary sibling and renamed into place, so an interrupted conversion leaves nothing."""
    path, directory = Path(path), Path(directory)
    if directory.exists():
        raise UsageProblem(f"{directory} already exists; choose another directory")
    reader = open_reader(path)
    config = hf_config(reader, path)
    tensors, record = read_weights(reader, config, path)
    record["tokenizer"] = None
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        safetensors_io.save(staging / "model.safetensors", tensors, {"format": "pt"})
        record["tokenizer"] = write_tokenizer(reader, staging, path)
        config["ncclprobe_source"] = path.name
        (staging / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        (staging / CONVERSION_FILE).write_text(
            json.dumps(
                {**record, "version": CONVERSION_VERSION, "source_bytes": path.stat().st_size},
                indent=1,
            )
            + "\n"
        )
        staging.rename(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return directory


def cache_root() -> Path:
    if envvars.get(envvars.CACHE_DIR):
        return Path(envvars.get(envvars.CACHE_DIR))
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ncclprobe"


def cached_checkpoint(path: str | Path, on_convert=None) -> Path:
    """The converted checkpoint of `path` in the cache (`$NCCLPROBE_CACHE_DIR`, else
    ~/.cache/ncclprobe), converting it on first use; keyed by the file's absolute path, size and
    modification time, so a changed file is converted again. `on_convert(path, directory)` is
    called before a conversion starts (progress for the user)."""
    path = Path(path)
    try:
        stat = path.resolve().stat()
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror}") from None
    key = hashlib.sha256(
        f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\0{CONVERSION_VERSION}".encode()
    )
    directory = cache_root() / "gguf" / f"{path.stem}-{key.hexdigest()[:16]}"
    if (directory / CONVERSION_FILE).exists():
        return directory
    if on_convert:
        on_convert(path, directory)
    try:
        return convert_gguf(path, directory)
    except UsageProblem:
        if (directory / CONVERSION_FILE).exists():  # another process converted it meanwhile
            return directory
        raise


def conversion_record(directory: str | Path) -> dict | None:
    """The conversion record of a directory `convert_gguf` wrote; None for any other checkpoint."""
    record = Path(directory) / CONVERSION_FILE
    return json.loads(record.read_text()) if record.exists() else None


def resolve_checkpoint(path: str | Path, on_convert=None) -> Path:
    """The Llama checkpoint directory `--checkpoint PATH` stands for: PATH itself, or for a .gguf
    file its converted copy in the cache (converted now if it is not there yet)."""
    path = Path(path)
    if is_gguf(path):
        if not path.is_file():
            raise UsageProblem(f"checkpoint {path} does not exist or is not a file")
        return cached_checkpoint(path, on_convert)
    if not path.is_dir():
        raise UsageProblem(
            f"checkpoint {path} is neither a Llama checkpoint directory nor a .gguf file"
        )
    return path
