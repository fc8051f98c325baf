"""Building a ready-to-run engine: target (seeded or from a checkpoint), draft, sharding, caches.

The order matters and lives here once: build full weights identically on every rank, shard them
for the rank (`apply_tp`), then allocate the KV caches at the per-rank head count.
"""

from __future__ import annotations

import torch

from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.config import DraftConfig, ModelConfig
from ncclprobe.engine.draft import DraftHead, load_draft
from ncclprobe.engine.model import Transformer, init_weights
from ncclprobe.engine.tp import apply_tp

DRAFT_SEED_OFFSET = 7919  # the draft's random init must not mirror the target's


def build_target(cfg: ModelConfig, *, seed: int, device, dtype) -> Transformer:
    with torch.device(device):
        model = Transformer(cfg)
    model.to(dtype=dtype)
    init_weights(model, seed)
    return model.eval().requires_grad_(False)


def build_draft(target: Transformer, *, seed: int, path: str | None = None) -> DraftHead:
    """A trained draft from `path`, or a seeded untrained one (accepts almost nothing)."""
    embedding = target.embed_tokens
    if path:
        return load_draft(path, embedding, target.cfg.vocab, target.cfg.hidden).eval()
    weight = embedding.weight
    with torch.device(weight.device):
        draft = DraftHead(DraftConfig.for_target(target.cfg), embedding)
    draft.to(dtype=weight.dtype)
    init_weights(draft, seed + DRAFT_SEED_OFFSET)
    return draft.eval().requires_grad_(False)


def max_positions(prompt_len: int, new_tokens: int, k: int) -> int:
    """Cache slots a run can touch: prompt, new tokens, and the overshoot of the last cycle."""
    return prompt_len + new_tokens + 2 * (k + 2)


def shard_and_allocate(target: Transformer, draft: DraftHead | None, comm: Communicator, *,
                       draft_tp: bool, batch: int, max_seq: int) -> None:
    apply_tp(target, comm)
    target.setup_caches(batch, max_seq)
    if draft is not None:
        if draft_tp:
            apply_tp(draft, comm)
        draft.setup_caches(batch, max_seq)


def random_prompts(vocab: int, batch: int, length: int, seed: int, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=gen).to(device)
