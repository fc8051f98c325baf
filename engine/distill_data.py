"""Self-distillation data for the draft: the target's own text and what it computed on it.

Prompts are real text (token ids of a prompt set; `engine/prompts.py`) or, for presets without a
tokenizer, seeded random tokens. Sequence r continues prompt r mod P: the first continuation of
each prompt is greedy (what the greedy runs the draft serves will see), the further ones are
sampled at `data_temperature`, so 64 prompts give 512 different sequences of the model's own
text. Prompts of different lengths are right-padded (generate._last); `valid` marks the real
tokens of each row, `generated` the continuation.

One more target forward over every whole sequence records the EAGLE-3 features (the inputs of
the 3 captured layers) and the target's next-token distribution at every position, read at the
draft's tokens only: with a reduced draft vocabulary (SmolLM2: 49152 tokens) a full-vocabulary
distribution for 512 sequences of 200 positions would take 20 GB. Generation and labelling run
in chunks of `chunk` sequences for the same reason (a prefill's logits are [chunk, prompt, V]).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ncclprobe.engine.build import random_prompts
from ncclprobe.engine.draft import DraftHead
from ncclprobe.engine.generate import Engine


@dataclass
class DistillData:
    tokens: torch.Tensor  # [N, L] prompt + continuation, right-padded
    valid: torch.Tensor  # [N, L] bool: a real token (prompt or continuation)
    generated: torch.Tensor  # [N, L] bool: a token the target generated


@dataclass(frozen=True)
class Labels:
    """What the draft learns from at each position of `DistillData.tokens` (`label`)."""

    features: torch.Tensor  # [N, L, 3H] float32: the target's features
    probs: torch.Tensor  # [N, L, draft vocab] float32: the target's distribution there
    greedy: torch.Tensor  # [N, L] the target's greedy token as a draft index, -1 outside


def padded(prompts, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompts right-padded to the longest [P, n], lengths [P]) from token-id tuples."""
    tokens = torch.zeros(len(prompts), max(len(p) for p in prompts), dtype=torch.long)
    for row, ids in enumerate(prompts):
        tokens[row, : len(ids)] = torch.tensor(ids)
    return tokens.to(device), torch.tensor([len(p) for p in prompts], device=device)


def training_prompts(spec, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt of every training sequence (P given prompts cycled to `spec.sequences`, or
    fresh random ones) and its length."""
    if not spec.prompts:
        prompts = random_prompts(vocab, spec.sequences, spec.prompt_len, spec.seed + 1, device)
        return prompts, torch.full((spec.sequences,), spec.prompt_len, device=device)
    tokens, lengths = padded(spec.prompts, device)
    rows = torch.arange(spec.sequences, device=device) % len(spec.prompts)
    return tokens[rows], lengths[rows]


@torch.no_grad()
def generate(target, spec, device, chunk: int = 64, progress=None) -> DistillData:
    """The target's continuations of every training prompt (`spec.gen_len` tokens each);
    `progress(done, total)` after each chunk of sequences (generation is most of a CPU run)."""
    prompts, lengths = training_prompts(spec, target.cfg.vocab, device)
    distinct = len(spec.prompts) if spec.prompts else spec.sequences
    width = prompts.shape[1] + spec.gen_len
    tokens = torch.zeros(spec.sequences, width, dtype=torch.long, device=device)
    tokens[:, : prompts.shape[1]] = prompts
    if progress:
        progress(0, spec.sequences)  # generation starts: its clock with it
    for start in range(0, spec.sequences, chunk):
        rows = slice(start, min(start + chunk, spec.sequences))
        greedy_part = min(
            max(distinct - start, 0), rows.stop - start
        )  # rows below `distinct` are greedy
        for sub, temperature in (
            (slice(rows.start, rows.start + greedy_part), 0.0),
            (slice(rows.start + greedy_part, rows.stop), spec.data_temperature),
        ):
            if sub.stop <= sub.start:
                continue
            target.setup_caches(sub.stop - sub.start, width + 1)
            engine = Engine(target, temperature=temperature, seed=spec.seed + sub.start)
            out = torch.tensor(
                engine.baseline(prompts[sub], spec.gen_len, lengths[sub]).tokens, device=device
            )
            index = lengths[sub, None] + torch.arange(spec.gen_len, device=device)
            tokens[sub] = tokens[sub].scatter(1, index, out)
        if progress:
            progress(rows.stop, spec.sequences)
    position = torch.arange(width, device=device)
    valid = position[None, :] < (lengths + spec.gen_len)[:, None]
    return DistillData(
        tokens=tokens, valid=valid, generated=valid & (position[None, :] >= lengths[:, None])
    )


@torch.no_grad()
def label(target, draft, data: DistillData, chunk: int = 16) -> Labels:
    """The target's features and its distribution at the draft's tokens (call after the draft's
    vocabulary was chosen)."""
    N, L = data.tokens.shape
    target.setup_caches(min(chunk, N), L + 1)
    features, probs, greedy = [], [], []
    positions = torch.arange(L, device=data.tokens.device)
    for start in range(0, N, chunk):
        part = data.tokens[start : start + chunk]
        logits, feats = target(part, positions.expand(part.shape[0], L), capture=True)
        in_head, hard = draft_labels(draft, torch.softmax(logits.float(), dim=-1))
        features.append(feats.float())
        probs.append(in_head)
        greedy.append(hard)
    return Labels(torch.cat(features), torch.cat(probs), torch.cat(greedy))


def draft_labels(draft: DraftHead, target_probs: torch.Tensor):
    """(target probabilities at the draft's tokens [..., draft vocab], the target's greedy token
    as a draft id [...], -1 where the draft's head lacks it)."""
    vocab, target_vocab = draft.cfg.vocab, target_probs.shape[-1]
    greedy = target_probs.argmax(-1)
    if vocab == target_vocab and not draft.d2t.any():
        return target_probs, greedy
    ids = draft.to_target(torch.arange(vocab, device=target_probs.device))
    to_draft = torch.full((target_vocab,), -1, dtype=torch.long, device=target_probs.device)
    to_draft[ids] = torch.arange(vocab, device=target_probs.device)
    return target_probs[..., ids], to_draft[greedy]
