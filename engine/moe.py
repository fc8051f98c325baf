"""Mixture-of-experts layer in the DeepSeek-V3 / Kimi-K2 arrangement: a router picks the top-k
routed experts per token, a shared expert sees every token, and the outputs are summed.

Routing: sigmoid scores, top-k, weights renormalised to sum to one and multiplied by
`route_scale` (DeepSeek-V3's scheme without the expert-group limit or the load-balancing bias).

Two ways to run the experts, chosen from static shapes only (never from tensor values):
- gather (few token-expert pairs: decode, verify): each token gathers its k experts' weights and
  runs batched matmuls. Static shapes, no host sync, so it can be captured in a CUDA graph; the
  price is one extra copy of the chosen experts' weights.
- grouped (many pairs: prefill): sort the pairs by expert, one host sync for the counts, then one
  matmul per expert that received tokens. Eager only: a step being captured always gathers.

Under tensor parallelism every expert is sharded along its intermediate dimension (`tp.py`), so
each rank computes a partial sum for every token and one all-reduce after the layer completes it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ncclprobe.engine.layers import MLP

GATHER_MAX_PAIRS = 64  # above this many token-expert pairs, the grouped path (weights copied once)


def route(router_logits: torch.Tensor, top_k: int, scale: float):
    """(weights [N, k] float32, expert ids [N, k]) for each token's top-k experts."""
    scores = router_logits.float().sigmoid()
    weights, experts = scores.topk(top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True) * scale, experts


def swiglu(x, gate, up, down):
    return (F.silu(x @ gate.transpose(-1, -2)) * (x @ up.transpose(-1, -2))) @ down.transpose(
        -1, -2
    )


def experts_gathered(x, experts, weights, gate, up, down):
    """x [N, H]; experts/weights [N, k]; gate/up [E, I, H]; down [E, H, I] -> [N, H]."""
    xk = x[:, None, None, :]  # [N, 1, 1, H]
    y = swiglu(xk, gate[experts], up[experts], down[experts])  # [N, k, 1, H]
    return (y.squeeze(2) * weights[..., None].to(y.dtype)).sum(1)


def experts_grouped(x, experts, weights, gate, up, down):
    """Same result as `experts_gathered`, one matmul per expert that received tokens."""
    n, k = experts.shape
    flat = experts.reshape(-1)
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=gate.shape[0]).tolist()  # the one host sync
    token_of = order // k
    out = torch.zeros_like(x)
    start = 0
    for e, count in enumerate(counts):
        if count:
            rows = token_of[start : start + count]
            y = swiglu(x[rows], gate[e], up[e], down[e])
            w = weights.reshape(-1)[order[start : start + count]].to(y.dtype)
            out.index_add_(0, rows, y * w[:, None])
        start += count
    return out


def _capturing() -> bool:
    """Inside CUDA-graph capture the grouped path's host sync is impossible: gather regardless."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class MoE(nn.Module):
    def __init__(self, hidden: int, cfg):
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(hidden, cfg.experts, bias=False)
        width = cfg.expert_intermediate
        self.experts_gate = nn.Parameter(torch.empty(cfg.experts, width, hidden))
        self.experts_up = nn.Parameter(torch.empty(cfg.experts, width, hidden))
        self.experts_down = nn.Parameter(torch.empty(cfg.experts, hidden, width))
        self.shared = MLP(hidden, width * cfg.shared_experts) if cfg.shared_experts else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, experts = route(self.router(flat), self.cfg.top_k, self.cfg.route_scale)
        few = flat.shape[0] * self.cfg.top_k <= GATHER_MAX_PAIRS
        run = experts_gathered if few or _capturing() else experts_grouped
        y = run(flat, experts, weights, self.experts_gate, self.experts_up, self.experts_down)
        if self.shared is not None:
            y = y + self.shared(flat)
        return y.reshape(shape)
