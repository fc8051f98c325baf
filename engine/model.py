"""The target model: a Llama-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU), with
optional MoE layers (`moe.py`).

This file knows nothing about distribution: tensor parallelism is applied afterwards by
`tp.apply_tp`, which slices the weights and hooks an all-reduce onto the attention and MLP
outputs. Head counts are therefore never stored: they are read off the weight shapes
(`view(B, T, -1, head_dim)`), so a sharded module runs unchanged.

One forward serves prefill, decode and verify: tokens `[B, T]` at explicit positions `[B, T]`
(each sequence has its own length), written into the static KV cache and attended with a
causal mask indexed by those positions. Nothing in `forward` reads a tensor value on the host,
so a step can be captured in a CUDA graph.

Weight names follow Hugging Face's Llama where they exist (q_proj, gate_proj, ...), so the loader
is a rename, not a reshuffle; RoPE uses the same rotate-half convention for the same reason.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ncclprobe.engine import split_kv_attention as split_kv
from ncclprobe.engine.config import ModelConfig, RopeScaling
from ncclprobe.engine.kv_cache import KVCache, causal_mask
from ncclprobe.engine.layers import MLP, concat_linears
from ncclprobe.engine.moe import MoE


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused kernel on GPU (it accumulates in float32, like Llama's reference); at batch 1
        # the six separate elementwise kernels of the textbook form cost more than the matmuls' gaps
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None) -> torch.Tensor:
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling is None:
        return inv_freq.float()
    # Llama-3.1: long wavelengths slowed by `factor`, short ones kept, a smooth blend between
    low_wavelen = scaling.original_max_position / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (scaling.original_max_position / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    out = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, blended)
    return torch.where(wavelen < high_wavelen, inv_freq, out).float()


class Rope(nn.Module):
    """cos/sin tables for every cache position, looked up by position (graph-safe indexing)."""

    cos: torch.Tensor  # buffers: [max_seq, head_dim]
    sin: torch.Tensor

    def __init__(
        self, head_dim: int, theta: float, scaling: RopeScaling | None, max_seq: int, dtype, device
    ):
        super().__init__()
        inv_freq = rope_frequencies(head_dim, theta, scaling).to(device)
        angles = torch.outer(torch.arange(max_seq, device=device, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

    def forward(self, positions: torch.Tensor):
        return self.cos[positions].unsqueeze(2), self.sin[positions].unsqueeze(2)  # [B, T, 1, D]


def apply_rope(x: torch.Tensor, rope) -> torch.Tensor:
    cos, sin = rope
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.head_dim = head_dim
        self.q_proj = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, out_dim, bias=False)
        self.kv_cache: KVCache | None = None
        self.qkv_proj: nn.Linear | None = None  # set by fuse(); then q/k/v_proj are gone
        self.widths = (heads * head_dim, kv_heads * head_dim, kv_heads * head_dim)

    @property
    def local_kv_heads(self) -> int:
        return self._widths()[1] // self.head_dim  # per rank once sharded

    def _widths(self) -> tuple[int, int, int]:
        if self.qkv_proj is not None:
            return self.widths
        return (self.q_proj.out_features, self.k_proj.out_features, self.v_proj.out_features)

    def fuse(self) -> None:
        """One GEMM for q, k and v (after sharding, for running only): at batch 1 three small
        matrix-vector products waste bandwidth and launches that one larger product does not."""
        self.widths = self._widths()
        self.qkv_proj = concat_linears(self.q_proj, self.k_proj, self.v_proj)
        del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x, rope, positions, mask):
        B, T, _ = x.shape
        if self.qkv_proj is not None:  # q and k sit side by side: rotate both in one pass
            qkv = self.qkv_proj(x)
            q_width, k_width, _ = self.widths
            qk = apply_rope(qkv[..., : q_width + k_width].view(B, T, -1, self.head_dim), rope)
            q, k = qk.split((q_width // self.head_dim, k_width // self.head_dim), dim=2)
            v = qkv[..., q_width + k_width :].view(B, T, -1, self.head_dim)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            q = apply_rope(q.view(B, T, -1, self.head_dim), rope)
            k = apply_rope(k.view(B, T, -1, self.head_dim), rope)
            v = v.view(B, T, -1, self.head_dim)
        keys, values = self.kv_cache.update(positions, k, v)
        return self.o_proj(grouped_attention(q, keys, values, mask, positions))


def grouped_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of q [B, T, H, D] at `positions` [B, T] over the cache [B, S, KVH, D] with
    `causal_mask(positions, S, attention_group(T, H, KVH))`; returns [B, T, H*D].

    On a GPU, steps of up to `split_kv.MAX_ROWS` query rows (decode, verify, draft steps, short
    prompts) go to `split_kv_attention`, which computes the same causal mask from `positions` and
    reads only the live part of the cache. The torch paths serve the CPU, longer prompts and
    benchmarks, each the fastest for its step at llama shapes (docs/LOG.md, "Figures that lived in
    docstrings"):
    - one token (decode, chained draft steps): SDPA with `enable_gqa`;
    - several tokens (verify, draft extend, prefill): the G = H/KVH query heads sharing a KV head
      are folded into the query rows (t-major), then matmul, float32 softmax, matmul, so each KV
      head is read once (SDPA's `enable_gqa` math fallback repeats K and V G times over the cache).
    """
    B, T, H, D = q.shape
    kv_heads = keys.shape[2]
    if positions is not None and split_kv.applies(q, kv_heads):
        return split_kv.split_kv_attention(q, keys, values, positions)
    if T == 1:
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=mask,
            enable_gqa=True,
        )
        return y.transpose(1, 2).reshape(B, T, H * D)
    group = H // kv_heads
    rows = (
        q.view(B, T, kv_heads, group, D).permute(0, 2, 1, 3, 4).reshape(B, kv_heads, T * group, D)
    )
    scores = (rows @ keys.permute(0, 2, 3, 1)).float() * D**-0.5
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1).to(q.dtype)
    y = probs @ values.transpose(1, 2)
    return y.view(B, kv_heads, T, group, D).transpose(1, 2).reshape(B, T, H * D)


def attention_group(tokens: int, heads: int, kv_heads: int) -> int:
    """The mask's row repeat that `grouped_attention` expects for a step of `tokens` per sequence."""
    return 1 if tokens == 1 else heads // kv_heads


def fuse_projections(model: nn.Module) -> nn.Module:
    """Fuse q/k/v and gate/up in every attention and MLP of `model` (call after `apply_tp`)."""
    for module in list(model.modules()):
        if (
            isinstance(module, (Attention, MLP))
            and getattr(module, "qkv_proj", None) is None
            and getattr(module, "gate_up_proj", None) is None
        ):
            module.fuse()
    return model


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.self_attn = Attention(cfg.hidden, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp: MLP | MoE = (
            MoE(cfg.hidden, cfg.moe)
            if cfg.is_moe_layer(index)
            else MLP(cfg.hidden, cfg.intermediate)
        )

    def forward(self, x, rope, positions, mask):
        h = x + self.self_attn(self.input_layernorm(x), rope, positions, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rope: Rope | None = None

    @property
    def blocks(self) -> list[Block]:
        """The layers as what they are (nn.ModuleList yields plain modules)."""
        return cast("list[Block]", list(self.layers))

    def setup_caches(self, batch: int, max_seq: int) -> None:
        """Allocate the static KV caches and RoPE tables once, after any sharding."""
        weight = self.embed_tokens.weight
        self.rope = Rope(
            self.cfg.head_dim,
            self.cfg.rope_theta,
            self.cfg.rope_scaling,
            max_seq,
            weight.dtype,
            weight.device,
        )
        for layer in self.blocks:
            attn = layer.self_attn
            attn.kv_cache = KVCache(
                batch, max_seq, attn.local_kv_heads, attn.head_dim, weight.dtype, weight.device
            )

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, capture: bool = False):
        """Logits [B, T, vocab] and, with `capture`, the draft's features [B, T, 3*hidden]:
        the inputs of the layers in `cfg.capture_layers` (EAGLE-3's low, middle and high)."""
        assert self.rope is not None, "setup_caches() first: it sizes the RoPE tables"
        x = self.embed_tokens(tokens)
        rope = self.rope(positions)
        group = attention_group(tokens.shape[1], self.cfg.heads, self.cfg.kv_heads)
        mask = causal_mask(positions, self.rope.cos.shape[0], group)
        inputs = {}
        for i, layer in enumerate(self.layers):
            if capture and i in self.cfg.capture_layers:
                inputs[i] = x
            x = layer(x, rope, positions, mask)
        logits = self.lm_head(self.norm(x))
        features = (
            torch.cat([inputs[i] for i in self.cfg.capture_layers], dim=-1) if capture else None
        )
        return logits, features


def init_weights(model: nn.Module, seed: int) -> None:
    """Seeded random weights, scaled so activations stay O(1) through every layer.

    Linear weights ~ N(0, 1/fan_in) keep each projection's output at unit scale; the projections
    that write into the residual stream (o_proj, down_proj and the experts' down) are further
    divided by sqrt(2 * layers), GPT-2's rule, so the residual grows like sqrt(depth) at most.
    Embeddings ~ N(0, 1); norms start at 1. Same seed, same device type -> same weights, which is
    what lets every TP rank slice its shard out of one identical full model.
    """
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    depth = getattr(getattr(model, "cfg", None), "layers", 1)
    for name, param in sorted(model.named_parameters()):
        with torch.no_grad():
            if name.endswith("norm.weight") or "layernorm" in name:
                param.fill_(1.0)
            elif "embed_tokens" in name:
                param.normal_(0.0, 1.0, generator=gen)
            else:
                std = 1.0 / math.sqrt(param.shape[-1])
                if any(key in name for key in ("o_proj", "down_proj", "experts_down")):
                    std /= math.sqrt(2 * depth)
                param.normal_(0.0, std, generator=gen)
