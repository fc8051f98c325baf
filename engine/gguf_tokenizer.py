"""The tokenizer a GGUF file describes in its metadata, as Hugging Face `tokenizer.json` files.

A GGUF holds its tokenizer as llama.cpp key names: the vocabulary (`tokenizer.ggml.tokens`), the
BPE merges, each token's type (3 = control, 4 = user-defined), the special ids, and a
pre-tokenizer name (`tokenizer.ggml.pre`) that stands for the splitting regexes llama.cpp
hard-codes per name (src/llama-vocab.cpp). Built here with the `tokenizers` library, only for
the byte-level BPE (`gpt2`) family and the pre-tokenizers whose regexes are known below; another
file still loads, with text prompts refused for it (token-id prompts still run).

SmolLM2's `smollm` pre-tokenizer is llama.cpp's two regexes: each digit alone (`\\p{N}`), then
GPT-2's split. transformers' GGUF loader (5.x) has no entry for `smollm` and falls back to
GPT-2's split alone, which keeps digit runs together: for text with numbers its ids can differ
from llama.cpp's and from the original model's tokenizer (tests/test_engine_gguf.py shows where).
"""

from __future__ import annotations

import json
from pathlib import Path

from ncclprobe.errors import UsageProblem

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's pre-tokenizer names -> the regexes it applies in order (each to the pieces of the last)
PRE_TOKENIZER_SPLITS = {
    "default": (GPT2_SPLIT,),
    "gpt2": (GPT2_SPLIT,),
    "gpt-2": (GPT2_SPLIT,),
    "smollm": (r"\p{N}", GPT2_SPLIT),
    "starcoder": (r"\p{N}", GPT2_SPLIT),
    "refact": (r"\p{N}", GPT2_SPLIT),
    "llama3": (LLAMA3_SPLIT,),
    "llama-v3": (LLAMA3_SPLIT,),
    "llama-bpe": (LLAMA3_SPLIT,),
}
CONTROL, USER_DEFINED = 3, 4


def byte_alphabet() -> dict[int, str]:
    """GPT-2's map of the 256 byte values to printable characters, in which byte-level BPE
    vocabularies are spelled."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def field(reader, key: str, default=None):
    """One GGUF metadata entry's contents (`default` when the file lacks it)."""
    entry = reader.fields.get(key)
    return default if entry is None else entry.contents()


def build_tokenizer(reader, path):
    """A `tokenizers.Tokenizer` from the GGUF metadata and the tokenizer_config.json entries, or
    (None, reason) when this family is not built here."""
    model, pre = (
        field(reader, "tokenizer.ggml.model"),
        field(reader, "tokenizer.ggml.pre", "default"),
    )
    if model != "gpt2":
        return None, f"tokenizer model {model!r} (only byte-level BPE, 'gpt2', is built)"
    if pre not in PRE_TOKENIZER_SPLITS:
        return None, f"pre-tokenizer {pre!r} (its splitting rules are not known here)"
    try:
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise UsageProblem(
            f"building the tokenizer of {path} needs the tokenizers package: "
            f"pip install 'ncclprobe[gguf]'"
        ) from None
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    alphabet = byte_alphabet()
    spelled = set(alphabet.values())
    vocab = {
        (t if set(t) <= spelled else "".join(alphabet[b] for b in t.encode())): i
        for i, t in enumerate(tokens)
    }
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges") or ()]
    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated")
            for split in PRE_TOKENIZER_SPLITS[pre]
        ]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, kind in zip(tokens, types)
            if kind == CONTROL and set(t) <= spelled
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, kind in zip(tokens, types)
            if kind == USER_DEFINED
        ]
    )

    def special(key):
        index = field(reader, f"tokenizer.ggml.{key}_token_id")
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": special("bos"),
        "eos_token": special("eos"),
        "unk_token": special("unknown"),
        "pad_token": special("padding"),
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(field(reader, "tokenizer.ggml.add_eos_token", False)),
        "chat_template": field(reader, "tokenizer.chat_template"),
        "ncclprobe_pre_tokenizer": pre,
    }
    return tokenizer, config


def write_tokenizer(reader, directory: Path, path) -> dict:
    """Write tokenizer.json and tokenizer_config.json into `directory`; returns what the
    conversion record says about the tokenizer (built, or why not)."""
    tokenizer, config = build_tokenizer(reader, path)
    if tokenizer is None:
        return {"built": False, "reason": config}
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return {
        "built": True,
        "pre_tokenizer": config["ncclprobe_pre_tokenizer"],
        "vocab": tokenizer.get_vocab_size(),
    }
