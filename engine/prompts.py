"""Prompts for the engine: text (encoded by the checkpoint's tokenizer) or token ids.

A prompts file is either plain text, one prompt per line (blank lines skipped), or JSON Lines
(`.jsonl`), one object per line with `"text"` or `"ids"` (a JSON string alone is text too), so a
prompt can hold newlines.

The shipped set (`engine/data/prompts.jsonl`, 80 prompts written for ncclprobe and released
with it under its Apache-2.0 licence) covers eight kinds of request, ten each, in the manner of
MT-Bench's categories (writing, roleplay, reasoning, math, coding, extraction, STEM, humanities):
64 `train` prompts from which `train-draft` makes the target's own text, and 16 `heldout`
prompts (two per kind) that no draft was trained on, for acceptance figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.validate import loads_json, read_text

SHIPPED = Path(__file__).parent / "data" / "prompts.jsonl"
SPLITS = ("train", "heldout")
MAX_PROMPT_FILE_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    ids: tuple[int, ...] | None = None


def shipped_prompts(split: str) -> list[Prompt]:
    """The shipped set's `train` or `heldout` prompts, in file order."""
    if split not in SPLITS:
        raise UsageProblem(f"prompt set {split!r} does not exist; choose {' or '.join(SPLITS)}")
    rows = [
        json.loads(line)
        for line in SHIPPED.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return [Prompt(text=row["text"]) for row in rows if row["split"] == split]


def read_prompts_file(path: str | Path) -> list[Prompt]:
    path = Path(path)
    # size limit, devices (/dev/zero), binary files, UTF-16: the one input reader (ncclprobe.validate)
    text = read_text(path, "prompts file", limit=MAX_PROMPT_FILE_BYTES, errors="strict")
    if path.suffix.lower() != ".jsonl":
        prompts = [Prompt(text=line) for line in text.splitlines() if line.strip()]
    else:
        prompts = [
            _json_prompt(line, path, number)
            for number, line in enumerate(text.splitlines(), 1)
            if line.strip()
        ]
    if not prompts:
        raise UsageProblem(f"{path} holds no prompt")
    return prompts


def _json_prompt(line: str, path: Path, number: int) -> Prompt:
    doc = loads_json(line, f"{path}:{number}")  # strict: no NaN, nesting bounded
    if isinstance(doc, str):
        return Prompt(text=doc)
    if isinstance(doc, dict) and isinstance(doc.get("text"), str):
        return Prompt(text=doc["text"])
    ids = doc.get("ids") if isinstance(doc, dict) else None
    if isinstance(ids, list) and ids and all(type(i) is int and i >= 0 for i in ids):
        return Prompt(ids=tuple(ids))
    raise UsageProblem(
        f'{path}:{number}: expected a string, {{"text": STRING}} or {{"ids": [non-negative '
        f"integers]}}"
    )


def encode_prompts(prompts: list[Prompt], codec, chat: bool = False) -> tuple[tuple[int, ...], ...]:
    """Token ids of every prompt; text needs `codec` (engine.tokenizer.TextCodec), `chat` wraps
    text in its chat template first. Ids are taken as they are."""
    encoded = []
    for prompt in prompts:
        if prompt.ids is not None:
            encoded.append(prompt.ids)
            continue
        if codec is None:
            raise UsageProblem(
                "text prompts need a checkpoint with a tokenizer (--checkpoint); a preset has none"
            )
        encoded.append(tuple(codec.encode(codec.chat(prompt.text) if chat else prompt.text)))
    return tuple(encoded)


def codec_for(checkpoint: str | None, required: bool = False):
    """The tokenizer of a run's checkpoint, or None (a preset, or a checkpoint without one);
    `required`: say why there is none instead."""
    if not checkpoint:
        if required:
            raise UsageProblem(
                "text prompts need a checkpoint with a tokenizer (--checkpoint); a preset has none"
            )
        return None
    from ncclprobe.engine.gguf_loader import resolve_checkpoint
    from ncclprobe.engine.tokenizer import load_codec

    directory = resolve_checkpoint(checkpoint)
    return load_codec(directory) if required or (directory / "tokenizer.json").exists() else None


def add_text(doc: dict, spec) -> None:
    """Decoded text beside the token ids in an engine trace: `config.prompts` (the given prompts,
    ids and text) and each run's `text` (one string per sequence), when the checkpoint has a
    tokenizer."""
    codec = codec_for(spec.checkpoint)
    if spec.prompts:
        doc["config"]["prompts"] = [
            {"ids": list(ids), "text": codec.decode(ids) if codec else None} for ids in spec.prompts
        ]
    if codec is not None:
        for run in doc["runs"]:
            run["text"] = [codec.decode(tokens) for tokens in run["tokens"]]


def gather_prompts(
    checkpoint: str | None,
    *,
    texts=(),
    file: str | None = None,
    prompt_set: str | None = None,
    chat: bool = False,
) -> tuple[tuple[int, ...], ...]:
    """The token ids of every prompt a command was given: `texts` (each one prompt), then the
    prompts of `file`, then the shipped set's `prompt_set` split; () when none was given."""
    prompts = [Prompt(text=text) for text in texts]
    if file:
        prompts += read_prompts_file(file)
    if prompt_set:
        prompts += shipped_prompts(prompt_set)
    if chat and not any(p.text is not None for p in prompts):
        raise UsageProblem(
            "--chat wraps text prompts in the chat template; give --prompt, --prompts or --prompt-set"
        )
    if not prompts:
        return ()
    needs_text = any(p.text is not None for p in prompts)
    return encode_prompts(
        prompts, codec_for(checkpoint, required=True) if needs_text else None, chat
    )
