"""Acceptance of drafted tokens, as pure functions of tensors (no model, no host sync).

Shapes: B sequences, k drafted tokens each, vocabulary V. The verify forward scores k+1
positions: position i's logits are the target's distribution for the token after
[context, d_1..d_i], so position 0 judges d_1 and position k yields the bonus token.

Both functions return (accepted [B] in 0..k, next_token [B]): the sequence keeps d_1..d_accepted
and then next_token, i.e. accepted+1 new tokens per cycle.
"""

from __future__ import annotations

import torch


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row of `probs` [..., V] by inverse CDF: no multinomial, no host sync."""
    cdf = probs.float().cumsum(-1)
    u = torch.rand(cdf.shape[:-1] + (1,), generator=generator, device=probs.device) * cdf[..., -1:]
    return (cdf < u).sum(-1).clamp_(max=probs.shape[-1] - 1)


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def greedy_accept(drafts: torch.Tensor, target_logits: torch.Tensor):
    """Greedy: keep the longest prefix of drafts equal to the target's argmax, then the target's
    own choice at the first mismatch (or the bonus after k matches).

    drafts [B, k]; target_logits [B, k+1, V]. The output is by construction exactly what greedy
    decoding of the target alone would produce.
    """
    choice = target_logits.argmax(-1)  # [B, k+1]
    matches = drafts == choice[:, :-1]
    accepted = matches.long().cumprod(-1).sum(-1)  # length of the all-match prefix
    return accepted, choice.gather(1, accepted[:, None]).squeeze(1)


def rejection_accept(
    drafts: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
):
    """Standard speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

    drafts [B, k] were sampled from draft_probs q [B, k, V]; target_probs p [B, k+1, V].
    - Draft i is accepted with probability min(1, p(d_i) / q(d_i)), i.e. when u * q < p for a
      uniform u: if p >= q always, otherwise with probability p/q.
    - At the first rejection the replacement is drawn from the residual norm(max(p - q, 0)).
      Together: P(emit x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(q(y), p(y))) * residual(x)
      = min(q(x), p(x)) + max(p(x) - q(x), 0) = p(x): the emitted token follows the target.
    - If all k are accepted the bonus token is drawn from p at position k (q is taken as 0
      there, which makes the same residual formula return p itself).
    """
    B, k = drafts.shape
    p_draft = target_probs[:, :k].gather(-1, drafts[..., None]).squeeze(-1)
    q_draft = draft_probs.gather(-1, drafts[..., None]).squeeze(-1)
    u = torch.rand((B, k), generator=generator, device=drafts.device)
    ok = u * q_draft < p_draft
    accepted = ok.long().cumprod(-1).sum(-1)
    q_padded = torch.cat(
        [draft_probs, torch.zeros_like(draft_probs[:, :1])], dim=1
    )  # q = 0 at position k
    index = accepted[:, None, None].expand(B, 1, target_probs.shape[-1])
    p_at = target_probs.gather(1, index).squeeze(1)
    residual = (p_at - q_padded.gather(1, index).squeeze(1)).clamp_(min=0)
    # p == q exactly leaves nothing to resample from; that event has probability 0 unless a
    # draft was rejected by rounding, and then p itself is the right answer
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, p_at, residual)
    return accepted, sample(residual, generator)
