"""Training the target itself, briefly, on the synthetic chain of `synthetic_corpus.py`.

Why: speculative decoding only pays when the target's next token is predictable; random weights
make it a hash of the context (see `synthetic_corpus`). A preset-shaped Transformer trained for a
minute on a learnable language, saved as a Hugging Face Llama directory
(`hf_loader.save_hf_checkpoint`), is a target that `train-draft --checkpoint` and
`run-engine --checkpoint` serve unchanged. Results with it must be labelled "target trained on a
synthetic corpus".

The training forward runs the model's own modules without the KV cache: the same RMSNorm, RoPE
tables, projections, MLP and head as `Transformer.forward`, with causal SDPA over the sequence in
place of the cached attention (tests check the logits agree), so the trained weights behave the
same in the engine's cached steps. Dense presets only: the MoE router would need its own balance.

Trained positions: the target only follows the chain at positions below `seq_len` (on `tiny`,
greedy agreement falls from 99.9% to about 5% past them), so `seq_len` must cover run-engine's
prompt + new tokens + k; the saved config.json says so in `max_position_embeddings`.

Sizing (the defaults below are `small`'s): 320 positions cover run-engine's 16-token prompts with
up to ~300 new tokens, and the chain's 64^2 = 4096 order-2 contexts are each seen hundreds of times:
enough to learn their successors, and few enough that a one-layer draft learns the greedy walk too.
The best learning rate halves as the width doubles. The sizing arithmetic, the learning-rate
proxies and the measured times: docs/LOG.md, "Figures that lived in docstrings".
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ncclprobe.engine.build import materialised_on
from ncclprobe.engine.config import ModelConfig
from ncclprobe.engine.model import Rope, Transformer, apply_rope, init_weights
from ncclprobe.engine.synthetic_corpus import ChainSpec, MarkovChain
from ncclprobe.errors import UsageProblem

EVAL_SEED_OFFSET = 104729  # held-out sequences: a generator stream training never draws from


@dataclass(frozen=True, kw_only=True)
class TargetTrainSpec:
    """Defaults sized for `small` on one H200 (module docstring); `DEFAULTS` holds other presets'."""

    steps: int = 320
    batch: int = 24  # sequences per step
    seq_len: int = 320  # tokens per sequence (prefix + chain): the positions the target knows
    lr: float = 3e-4  # AdamW peak; linear warmup, cosine decay to lr * min_lr_ratio
    warmup: int = 30  # steps
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    active_vocab: int = 64  # ChainSpec fields, see synthetic_corpus
    successors: int = 5
    top_prob: float = 0.75
    eval_batch: int = 32  # held-out sequences for the final loss and argmax agreement
    seed: int = 0  # weights, chain and data

    def __post_init__(self):
        for name in ("steps", "batch", "seq_len", "eval_batch"):
            if getattr(self, name) < 1:
                raise UsageProblem(
                    f"train-target: {name} must be at least 1, got {getattr(self, name)}"
                )
        if self.lr <= 0 or self.warmup < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise UsageProblem(
                f"train-target: need lr > 0, warmup >= 0, 0 <= min_lr_ratio <= 1, got "
                f"{self.lr}, {self.warmup}, {self.min_lr_ratio}"
            )

    def chain(self, vocab: int) -> ChainSpec:
        return ChainSpec(
            vocab=vocab,
            active_vocab=self.active_vocab,
            successors=self.successors,
            top_prob=self.top_prob,
            seed=self.seed,
        )


# `tiny` learns on a CPU in about a minute; `small` in 44 s on one H200 (module docstring)
DEFAULTS = {"tiny": TargetTrainSpec(steps=800, batch=32, seq_len=96, lr=5e-3, warmup=30)}


def default_spec(name: str) -> TargetTrainSpec:
    return DEFAULTS.get(name, TargetTrainSpec())


def _require_dense(cfg: ModelConfig) -> None:
    if cfg.moe is not None:
        raise UsageProblem(f"train-target supports dense models only; {cfg.name} has MoE layers")


def build_trainable(cfg: ModelConfig, *, seed: int, device) -> Transformer:
    """A float32 (master-weight) model with the engine's seeded initialisation."""
    _require_dense(cfg)
    with materialised_on(device, torch.float32):
        model = Transformer(cfg)
    init_weights(model, seed)
    return model


def rope_tables(model: Transformer, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [1, length, 1, head_dim] in float32, from the engine's own `Rope`."""
    cfg = model.cfg
    rope = Rope(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, length, torch.float32, device)
    return rope.cos[None, :, None, :], rope.sin[None, :, None, :]


def training_logits(model: Transformer, tokens: torch.Tensor, rope=None) -> torch.Tensor:
    """Logits [B, T, vocab] of `tokens` at positions 0..T-1, without the KV cache (see docstring)."""
    cos, sin = rope if rope is not None else rope_tables(model, tokens.shape[1], tokens.device)
    x = model.embed_tokens(tokens)
    for layer in model.blocks:
        x = x + _attention(layer.self_attn, layer.input_layernorm(x), cos, sin)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.lm_head(model.norm(x))


def _attention(attn, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    B, T, _ = x.shape
    q = attn.q_proj(x).view(B, T, -1, attn.head_dim)
    rope = (
        cos[:, :T].to(q.dtype),
        sin[:, :T].to(q.dtype),
    )  # the engine keeps its tables in the weights' dtype
    q = apply_rope(q, rope)
    k = apply_rope(attn.k_proj(x).view(B, T, -1, attn.head_dim), rope)
    v = attn.v_proj(x).view(B, T, -1, attn.head_dim)
    y = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
    )
    return attn.o_proj(y.transpose(1, 2).reshape(B, T, -1))


def sequence_loss(logits: torch.Tensor, tokens: torch.Tensor, ruled: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) over the positions that predict a token drawn by the chain's rule."""
    labels = torch.where(ruled[:, 1:], tokens[:, 1:], -100)
    return F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100
    )


def learning_rate(spec: TargetTrainSpec, step: int) -> float:
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    progress = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
    return spec.lr * (
        spec.min_lr_ratio + (1 - spec.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    )


def _autocast(device: torch.device):
    """bf16 matmuls over float32 master weights on a GPU; plain float32 on a CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


@torch.no_grad()
def evaluate(model: Transformer, chain: MarkovChain, spec: TargetTrainSpec) -> dict:
    """Held-out loss, its floor (the chain's own entropy at those positions) and the share of
    positions with a most likely successor where the model's argmax is that successor."""
    device = chain.active.device
    gen = torch.Generator(device=device).manual_seed(spec.seed + EVAL_SEED_OFFSET)
    tokens, ruled = chain.sample(spec.eval_batch, spec.seq_len, gen)
    with _autocast(device):
        logits = training_logits(model, tokens)
    mask = ruled[:, 1:]
    a, b = tokens[:, :-2], tokens[:, 1:-1]  # context of each prediction from position 1 on
    top = chain.top(a, b)
    judged = mask[:, 1:] & (top >= 0)
    agree = (logits[:, 1:-1].argmax(-1) == top) & judged
    return {
        "eval_loss": float(sequence_loss(logits, tokens, ruled)),
        "entropy_bound": float(chain.entropy(a, b)[mask[:, 1:]].mean()),
        "argmax_agreement": float(agree.sum() / judged.sum().clamp(min=1)),
    }


def train_target(
    model: Transformer, spec: TargetTrainSpec, progress=None, log_every: int = 10
) -> dict:
    """Train `model` (float32, on its device) in place; `progress(step, steps, loss)` every
    `log_every` steps. Returns the report described in the module docstring's terms."""
    _require_dense(model.cfg)
    device = next(model.parameters()).device
    chain = MarkovChain(spec.chain(model.cfg.vocab), device)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    rope = rope_tables(model, spec.seq_len, device)
    optimiser = torch.optim.AdamW(
        model.parameters(),
        lr=spec.lr,
        weight_decay=0.0,
        betas=(0.9, 0.95),
        fused=device.type == "cuda",
    )
    model.train().requires_grad_(True)
    start, losses = time.perf_counter(), []
    for step, (tokens, ruled) in enumerate(_batches(chain, spec, gen)):
        for group in optimiser.param_groups:
            group["lr"] = learning_rate(spec, step)
        with _autocast(device):
            loss = sequence_loss(training_logits(model, tokens, rope), tokens, ruled)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        optimiser.step()
        losses.append(loss.detach())
        if progress and ((step + 1) % log_every == 0 or step + 1 == spec.steps):
            progress(step + 1, spec.steps, float(losses[-1]))
    history = torch.stack(losses).tolist()  # one host sync, after the loop
    seconds = time.perf_counter() - start
    model.eval().requires_grad_(False)
    window = max(1, spec.steps // 10)
    tokens_seen = spec.steps * spec.batch * spec.seq_len
    return {
        "steps": spec.steps,
        "tokens_seen": tokens_seen,
        "loss_first": sum(history[:window]) / window,
        "loss_last": sum(history[-window:]) / window,
        **evaluate(model, chain, spec),
        "chain_entropy": chain.chain_entropy,
        "train_seconds": seconds,
        "tokens_per_s": tokens_seen / seconds,
        "device": str(device),
        "spec": asdict(spec),
    }


def _batches(chain: MarkovChain, spec: TargetTrainSpec, gen, chunk: int = 16):
    """Training batches, drawn `chunk` steps at a time: the chain is sampled token by token, so
    one draw for 16 steps costs the kernel launches of one."""
    for first in range(0, spec.steps, chunk):
        tokens, ruled = chain.sample(min(chunk, spec.steps - first) * spec.batch, spec.seq_len, gen)
        yield from zip(tokens.split(spec.batch), ruled.split(spec.batch))


@torch.no_grad()
def greedy_agreement(
    model: Transformer, chain: MarkovChain, prompts: torch.Tensor, new_tokens: int
) -> float:
    """Share of the engine's greedy tokens (cached path, as `run-engine` decodes) after `prompts`
    that are the chain's most likely successor of their context, where the context has one."""
    from ncclprobe.engine.generate import Engine

    model.setup_caches(prompts.shape[0], prompts.shape[1] + new_tokens + 1)
    generated = torch.tensor(
        Engine(model).baseline(prompts, new_tokens).tokens, device=prompts.device
    )
    tokens = torch.cat([prompts, generated], dim=1)
    n = prompts.shape[1]
    top = chain.top(tokens[:, n - 2 : -2], tokens[:, n - 1 : -1])
    judged = top >= 0
    return float(((tokens[:, n:] == top) & judged).sum() / judged.sum().clamp(min=1))
