"""Training the EAGLE-3 draft by self-distillation from the target.

1. Data (`distill_data.py`): the target continues real prompts (a prompt set's text; for presets
   without a tokenizer, random tokens); one more target forward over each whole sequence records
   its features (the 3 captured layers) and its next-token distribution at every position.
   Nothing downloaded: the draft learns the target it will serve, on the target's own text.
2. Training-time test (EAGLE-3): the draft is unrolled `unroll` steps. Step 0 sees the target's
   features; step j feeds back the draft's own output of step j-1 from the previous slot, exactly
   as chained drafting does at inference. Attention reproduces what the draft's KV cache holds at
   inference: a query at slot p in step j sees step-0 keys at slots <= p-j (written by the draft
   extend with target features) and, for each step s = 1..j, the one key step s wrote at slot
   p-j+s. The loss is the cross-entropy against the target, weighted 0.8^j: against its whole
   distribution (`soft`), its greedy choice (`hard`) or the mean of both (`mixed`, the default).
3. Reduced vocabulary (`draft_vocab`, EAGLE-3's d2t): the draft's head covers only the tokens the
   target generated most, which keeps the acceptance as long as they cover most of what the target
   says (docs/LOG.md).

Data, not tricks, is what the draft of a random-weight target needs: its next-token distributions
are nearly flat, so what is learnable is mostly its greedy choice in context, and that takes many
(prompt, continuation) pairs; more data did better than a lower learning rate, a deeper unroll or
hard labels (docs/LOG.md). Where the target's distributions are flat over a large vocabulary the
soft loss teaches nothing (the gradient p_draft - p_target carries almost no information about the
argmax, which greedy acceptance needs); the hard half of `mixed` does. A draft learns what is
learnable: of a random target's greedy token, almost nothing.
"""

from __future__ import annotations

import functools
import logging
import operator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ncclprobe.engine.build import random_prompts
from ncclprobe.engine.distill_data import generate, label, padded
from ncclprobe.engine.draft import DraftHead
from ncclprobe.engine.generate import Engine
from ncclprobe.engine.model import Transformer, apply_rope
from ncclprobe.engine.train_spec import LABELS, TrainSpec
from ncclprobe.errors import UsageProblem

log = logging.getLogger("ncclprobe.engine.train_draft")
__all__ = ["LABELS", "TrainSpec", "positions_trained", "train"]


def positions_trained(spec: TrainSpec) -> int:
    """The sequence length the draft learns: the longest prompt plus the continuation."""
    return (max(len(p) for p in spec.prompts) if spec.prompts else spec.prompt_len) + spec.gen_len


def choose_vocabulary(
    draft: DraftHead,
    tokens: torch.Tensor,
    prompt_len: int = 0,
    generated: torch.Tensor | None = None,
) -> float:
    """Give a draft whose head is smaller than the target's vocabulary (EAGLE-3's reduced draft
    vocabulary) the tokens the target generated most often, in id order, through its `d2t` map;
    returns the share of generated tokens they cover. Generated tokens are those past `prompt_len`,
    or where `generated` [N, L] is true. Why: the draft's head is most of its cost at batch 1 (on
    `small` its 32000 x 2048 head is as large as the target's; SmolLM2's 49152 x 576 head is a fifth of
    its target), and a draft only ever needs to propose what the target actually says."""
    chosen_tokens = (
        tokens[generated] if generated is not None else tokens[:, prompt_len:].reshape(-1)
    )
    counts = torch.bincount(chosen_tokens, minlength=draft.cfg.target_vocab)
    chosen = (
        torch.sort(counts, descending=True, stable=True).indices[: draft.cfg.vocab].sort().values
    )
    with torch.no_grad():
        draft.d2t.copy_(chosen - torch.arange(draft.cfg.vocab, device=chosen.device))
    return float(counts[chosen].sum() / chosen_tokens.numel())


def unrolled_losses(
    draft: DraftHead,
    tokens,
    features,
    probs,
    greedy,
    unroll: int,
    labels: str = "mixed",
    valid: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """One loss per unrolled step (see the module docstring), against the target's distribution
    at the draft's tokens `probs` [B, L, draft vocab] and its greedy token `greedy` [B, L] (a draft
    index, -1 where the draft's head lacks it: no hard label there; `draft_labels`). `valid`
    [B, L]: the real tokens of right-padded rows; padding is never a label."""
    B, L = tokens.shape
    T = L - 1  # slots 1..L-1
    positions = torch.arange(1, L, device=tokens.device).expand(B, T)
    assert draft.rope is not None, "setup_caches() first: it sizes the RoPE tables"
    rope = draft.rope(positions)
    layer = draft.layer
    attn = layer.self_attn
    embedded = draft.embed(tokens[:, 1:]).float()
    hidden = draft.fc(features[:, :-1])
    keys, values, losses = [], [], []
    slot = torch.arange(T, device=tokens.device)
    probs, hard = probs[:, 1:], greedy[:, 1:]
    real = (
        valid[:, 1:]
        if valid is not None
        else torch.ones(B, T, dtype=torch.bool, device=tokens.device)
    )
    for j in range(unroll):
        x = layer.attention_input(embedded, hidden)
        q = apply_rope(attn.q_proj(x).view(B, T, -1, attn.head_dim), rope)
        keys.append(apply_rope(attn.k_proj(x).view(B, T, -1, attn.head_dim), rope))
        values.append(attn.v_proj(x).view(B, T, -1, attn.head_dim))
        masks = [slot[None, :] <= slot[:, None] - j]
        masks += [slot[None, :] == slot[:, None] - (j - s) for s in range(1, j + 1)]
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            torch.cat(keys, 1).transpose(1, 2),
            torch.cat(values, 1).transpose(1, 2),
            attn_mask=torch.cat(masks, dim=1),
            enable_gqa=True,
        )
        out = layer.finish(hidden, attn.o_proj(y.transpose(1, 2).reshape(B, T, -1)))
        logp = torch.log_softmax(draft.lm_head(draft.norm(out)).float(), dim=-1)
        counted = real & (slot >= j)[None, :]  # step j needs a chain back to slot 1
        losses.append(_cross_entropy(logp, probs, hard, labels)[counted].mean())
        hidden = torch.cat(
            [torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1
        )  # own output, one slot on
    return losses


def _cross_entropy(
    logp: torch.Tensor, probs: torch.Tensor, greedy: torch.Tensor, labels: str
) -> torch.Tensor:
    if labels == "soft":
        return -(probs * logp).sum(-1)
    known = greedy >= 0
    hard = -logp.gather(-1, greedy.clamp(min=0)[..., None]).squeeze(-1) * known
    if labels == "hard":
        return hard
    return 0.5 * (-(probs * logp).sum(-1) + hard)


@torch.no_grad()
def measure_acceptance(target: Transformer, draft: DraftHead, spec: TrainSpec, device) -> float:
    """Mean tokens per cycle (accepted drafts + 1) of greedy speculative decoding on prompts the
    draft was not trained on: the held-out ones given, or fresh random ones."""
    if spec.eval_prompt_ids:
        prompts, lengths = padded(spec.eval_prompt_ids, device)
    else:
        prompts = random_prompts(
            target.cfg.vocab, spec.eval_prompts, spec.prompt_len, spec.seed + 2, device
        )
        lengths = None
    max_seq = prompts.shape[1] + spec.gen_len + 2 * (spec.eval_k + 2)
    target.setup_caches(prompts.shape[0], max_seq)
    draft.setup_caches(prompts.shape[0], max_seq)
    engine = Engine(target, draft, k=spec.eval_k)
    accepted = engine.speculative(prompts, spec.gen_len, lengths).mean_acceptance_length
    assert accepted is not None  # gen_len >= 2 (TrainSpec): at least one cycle ran
    return accepted


def start_from_target_head(draft: DraftHead, target: Transformer) -> None:
    """EAGLE-3 starts the draft's head from the target's (the rows of the draft's tokens when its
    vocabulary is reduced): the draft then only has to learn the target's last hidden state, not
    the whole vocabulary map."""
    if draft.cfg.hidden == target.cfg.hidden:
        ids = draft.to_target(torch.arange(draft.cfg.vocab, device=draft.d2t.device))
        with torch.no_grad():
            draft.lm_head.weight.copy_(target.lm_head.weight[ids])
            draft.norm.weight.copy_(target.norm.weight)


@contextmanager
def tf32_matmuls(device: torch.device):
    """TensorFloat-32 matmuls while the float32 draft trains on a GPU: a draft as wide as
    llama-16l's (hidden 4096) trains several times faster, and the optimiser keeps float32
    weights. Not autocast: the draft's float32 KV cache takes its keys by `index_put_`, which
    refuses bfloat16 sources. The CPU and the inference that follows keep their precision."""
    previous = torch.get_float32_matmul_precision()
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def train(
    target: Transformer, draft: DraftHead, spec: TrainSpec, progress=None, data_progress=None
) -> dict:
    """Train `draft` in place (float32); returns losses and acceptance before and after;
    `data_progress(done, total)` while the target generates the data, `progress(step, steps, loss)`
    while the draft trains. The
    draft's head size is the draft's (`build_draft(vocab=spec.draft_vocab)`); a spec asking for
    another is refused rather than ignored."""
    if spec.draft_vocab and spec.draft_vocab != draft.cfg.vocab:
        raise UsageProblem(
            f"train-draft: the spec asks for a {spec.draft_vocab}-token draft vocabulary, the draft has "
            f"{draft.cfg.vocab}"
        )
    device = next(target.parameters()).device
    before = measure_acceptance(target, draft, spec, device)
    data = generate(target, spec, device, progress=data_progress)
    coverage = (
        choose_vocabulary(draft, data.tokens, generated=data.generated)
        if draft.cfg.vocab < target.cfg.vocab
        else 1.0
    )
    labelled = label(target, draft, data)
    start_from_target_head(draft, target)
    draft.float().requires_grad_(True)
    draft.setup_caches(1, data.tokens.shape[1] + 1)
    optimiser = torch.optim.AdamW(draft.parameters(), lr=spec.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(spec.seed)
    history = []
    with tf32_matmuls(device):
        for step in range(spec.steps):
            rows = torch.randperm(spec.sequences, generator=gen)[: spec.batch].to(device)
            losses = unrolled_losses(
                draft,
                data.tokens[rows],
                labelled.features[rows],
                labelled.probs[rows],
                labelled.greedy[rows],
                spec.unroll,
                spec.labels,
                data.valid[rows],
            )
            loss = functools.reduce(operator.add, (0.8**j * v for j, v in enumerate(losses)))
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            history.append(float(losses[0].detach()))
            if progress:
                progress(step + 1, spec.steps, history[-1])
    draft.requires_grad_(False).eval()
    after = measure_acceptance(target, draft.to(next(target.parameters()).dtype), spec, device)
    window = max(1, spec.steps // 10)
    return {
        "loss_first": sum(history[:window]) / window,
        "loss_last": sum(history[-window:]) / window,
        "acceptance_length_before": before,
        "acceptance_length_after": after,
        "steps": spec.steps,
        "unroll": spec.unroll,
        "sequences": spec.sequences,
        "labels": spec.labels,
        "trained_positions": positions_trained(spec),
        "draft_vocab": draft.cfg.vocab,
        "draft_vocab_coverage": coverage,
        "prompts": len(spec.prompts) or None,
        "eval_prompts": len(spec.eval_prompt_ids) or spec.eval_prompts,
        "data_temperature": spec.data_temperature if spec.prompts else None,
    }
