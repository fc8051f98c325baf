"""Layers that the target model, the draft model and the MoE block share: the gated MLP and the
fusion of projections into one GEMM. They live below all three, so no model module imports another
to reach them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def concat_linears(*linears: nn.Linear) -> nn.Linear:
    """One linear layer whose output is the given layers' outputs side by side (frozen weights)."""
    weight = torch.cat([linear.weight.detach() for linear in linears], dim=0)
    fused = nn.Linear(
        weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype
    )
    fused.weight = nn.Parameter(weight, requires_grad=False)
    return fused


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.gate_up_proj: nn.Linear | None = None  # set by fuse()

    def fuse(self) -> None:
        """One GEMM for gate and up (after sharding, for running only)."""
        self.gate_up_proj = concat_linears(self.gate_proj, self.up_proj)
        del self.gate_proj, self.up_proj

    def forward(self, x):
        if self.gate_up_proj is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
