"""The EAGLE-3 draft head (SafeAILab/EAGLE `cnets.py`, as SGLang and vLLM port it).

- `fc` (3H -> H) fuses the target's features from a low, a middle and a high layer; later draft
  steps feed back the draft's own H-wide output and skip `fc`.
- One decoder layer whose attention input is [norm(token embedding), norm(hidden)] (2H wide); its
  residual is the hidden state, not the embedding; then a SwiGLU MLP, a final norm and a head.
- The head may cover a reduced draft vocabulary: draft index i is target id i + d2t[i] (EAGLE's
  offset table); with the full vocabulary d2t is all zeros.
- The token embedding is the target's, shared and frozen (not part of the draft's weights).

Slot convention: the draft slot at position p takes token x_p and the target feature of position
p-1 (the state that predicted x_p) and predicts x_{p+1}. The draft has its own static KV cache,
indexed by slot position, so drafts that get rejected are simply overwritten later.

Saved files use EAGLE-3's tensor names (`fc.weight`, `midlayer.self_attn.q_proj.weight`, ...,
`lm_head.weight`, `d2t`) plus our config in the safetensors metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import torch
from torch import nn

from ncclprobe.engine import safetensors_io
from ncclprobe.engine.config import DraftConfig
from ncclprobe.engine.kv_cache import KVCache, causal_mask
from ncclprobe.engine.layers import MLP
from ncclprobe.engine.model import Attention, RMSNorm, Rope, attention_group
from ncclprobe.errors import UsageProblem

CONFIG_KEY = "ncclprobe_draft_config"


class DraftLayer(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.self_attn = Attention(
            2 * cfg.hidden, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
        )
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = MLP(cfg.hidden, cfg.intermediate)

    def attention_input(self, embedded: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.input_layernorm(embedded), self.hidden_norm(hidden)], dim=-1)

    def finish(self, hidden: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        r = hidden + attn_out
        return r + self.mlp(self.post_attention_layernorm(r))


class DraftHead(nn.Module):
    d2t: torch.Tensor  # buffer: draft index -> offset to the target's id

    def __init__(self, cfg: DraftConfig, embedding: nn.Embedding):
        super().__init__()
        self.cfg = cfg
        self._embedding = (embedding,)  # shared with the target, frozen: not a draft weight
        self.fc = nn.Linear(3 * cfg.target_hidden, cfg.hidden, bias=False)
        self.layers = nn.ModuleList([DraftLayer(cfg)])
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.vocab, dtype=torch.long))
        self.rope: Rope | None = None

    @property
    def layer(self) -> DraftLayer:
        """The one decoder layer, as what it is (nn.ModuleList yields plain modules)."""
        return cast(DraftLayer, self.layers[0])

    @property
    def blocks(self) -> list[DraftLayer]:
        return [self.layer]

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._embedding[0](tokens)

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def setup_caches(self, batch: int, max_seq: int) -> None:
        weight = self.fc.weight
        self.rope = Rope(
            self.cfg.head_dim,
            self.cfg.rope_theta,
            self.cfg.rope_scaling,
            max_seq,
            weight.dtype,
            weight.device,
        )
        attn = self.layer.self_attn
        attn.kv_cache = KVCache(
            batch, max_seq, attn.local_kv_heads, attn.head_dim, weight.dtype, weight.device
        )

    def forward(
        self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, fuse: bool
    ):
        """(draft logits [B, T, draft vocab], output hidden [B, T, H]) for slots at `positions`.

        `fuse`: `hidden` holds the target's 3H features (draft extend) rather than the draft's own
        H-wide output (chained draft steps)."""
        assert self.rope is not None, "setup_caches() first: it sizes the RoPE tables"
        h = self.fc(hidden) if fuse else hidden
        layer = self.layer
        x = layer.attention_input(self.embed(tokens), h)
        group = attention_group(tokens.shape[1], self.cfg.heads, self.cfg.kv_heads)
        mask = causal_mask(positions, self.rope.cos.shape[0], group)
        out = layer.finish(h, layer.self_attn(x, self.rope(positions), positions, mask))
        return self.lm_head(self.norm(out)), out


def _eagle_name(name: str) -> str:
    return name.replace("layers.0.", "midlayer.", 1)


def save_draft(
    draft: DraftHead, path, extra_metadata: dict | None = None, *, replace: bool = False
) -> None:
    tensors = {_eagle_name(name): t for name, t in draft.state_dict().items()}
    metadata = {CONFIG_KEY: json.dumps(draft.cfg.to_json())}
    metadata.update({k: json.dumps(v) for k, v in (extra_metadata or {}).items()})
    safetensors_io.save(path, tensors, metadata, replace=replace)


def trained_positions(path) -> int | None:
    """The sequence length `train-draft` trained the draft on (positions 0 to this minus 1), from
    its file's metadata; None for a draft saved without it. Beyond those positions a draft has
    never learnt to predict, and its acceptance falls (docs/LOG.md)."""
    header, _ = safetensors_io.read_header(Path(path))
    training = json.loads(header.get("__metadata__", {}).get("training", "{}"))
    return training.get("trained_positions") if isinstance(training, dict) else None


def draft_target(path) -> dict | None:
    """The target identity `train-draft` recorded in the draft file (`ncclprobe.engine.target_identity`);
    None for a draft saved without it."""
    header, _ = safetensors_io.read_header(Path(path))
    target = json.loads(header.get("__metadata__", {}).get("target", "null"))
    return target if isinstance(target, dict) else None


def load_draft(path, embedding: nn.Embedding, target_vocab: int, target_hidden: int) -> DraftHead:
    """A trained draft from `save_draft`'s file, checked against the target it will serve."""
    tensors, metadata = safetensors_io.load(path)
    if CONFIG_KEY not in metadata:
        raise UsageProblem(f"{path} is not an ncclprobe draft (no {CONFIG_KEY} in its metadata)")
    cfg = DraftConfig.from_json(json.loads(metadata[CONFIG_KEY]))
    if cfg.target_vocab != target_vocab or cfg.target_hidden != target_hidden:
        raise UsageProblem(
            f"draft {path} was trained for a target with vocabulary {cfg.target_vocab} and "
            f"hidden {cfg.target_hidden}, not {target_vocab} and {target_hidden}"
        )
    device, dtype = embedding.weight.device, embedding.weight.dtype
    draft = DraftHead(cfg, embedding)
    state = {name.replace("midlayer.", "layers.0.", 1): t for name, t in tensors.items()}
    draft.load_state_dict(state)
    return draft.to(device=device, dtype=dtype).requires_grad_(False)
