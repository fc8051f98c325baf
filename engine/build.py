"""Building a ready-to-run engine: target (seeded or from a checkpoint), draft, sharding, caches.

The order matters and lives here once: build full weights identically on every rank, shard them
for the rank (`apply_tp`), then allocate the KV caches at the per-rank head count.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.config import DraftConfig, ModelConfig
from ncclprobe.engine.draft import DraftHead, load_draft
from ncclprobe.engine.model import Transformer, fuse_projections, init_weights
from ncclprobe.engine.tp import apply_tp

DRAFT_SEED_OFFSET = 7919  # the draft's random init must not mirror the target's


@contextmanager
def materialised_on(device, dtype):
    """Create parameters directly on `device` in `dtype`: a float32 copy of a large model first
    (kimi-k2-slice: 150 GB) would not fit."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def build_target(cfg: ModelConfig, *, seed: int, device, dtype) -> Transformer:
    with materialised_on(device, dtype):
        model = Transformer(cfg)
    init_weights(model, seed)
    return model.eval().requires_grad_(False)


def build_draft(
    target: Transformer, *, seed: int, path: str | None = None, vocab: int | None = None
) -> DraftHead:
    """A trained draft from `path`, or a seeded untrained one (accepts almost nothing) whose head
    covers `vocab` tokens (default: the target's whole vocabulary)."""
    embedding = target.embed_tokens
    if path:
        return load_draft(path, embedding, target.cfg.vocab, target.cfg.hidden).eval()
    weight = embedding.weight
    with materialised_on(weight.device, weight.dtype):
        draft = DraftHead(DraftConfig.for_target(target.cfg, vocab), embedding)
    init_weights(draft, seed + DRAFT_SEED_OFFSET)
    return draft.eval().requires_grad_(False)


def shard_and_allocate(
    target: Transformer,
    draft: DraftHead | None,
    comm: Communicator,
    *,
    draft_tp: bool,
    batch: int,
    max_seq: int,
) -> None:
    apply_tp(target, comm)
    fuse_projections(target)
    target.setup_caches(batch, max_seq)
    if draft is not None:
        if draft_tp:
            apply_tp(draft, comm)
        fuse_projections(draft)
        draft.setup_caches(batch, max_seq)


def random_prompts(vocab: int, batch: int, length: int, seed: int, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=gen).to(device)
