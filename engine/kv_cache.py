"""Static, position-indexed KV caches (the gpt-fast scheme).

A cache is one preallocated buffer per layer, `[batch, max_seq, kv_heads, head_dim]`, written at
each sequence's own positions. Nothing is ever rolled back: attention masks every key whose
position is above the query's, so the slots of a rejected draft are invisible until a later step
overwrites them. Because the buffers never move or change shape, a CUDA graph captured over a
step keeps reading and writing the right memory on every replay.
"""

from __future__ import annotations

import torch
from torch import nn


class KVCache(nn.Module):
    k: torch.Tensor  # buffers (register_buffer): [batch, max_seq, kv_heads, head_dim]
    v: torch.Tensor
    rows: torch.Tensor  # [batch, 1]: each sequence's row, for index_put_

    def __init__(self, batch: int, max_seq: int, kv_heads: int, head_dim: int, dtype, device):
        super().__init__()
        shape = (batch, max_seq, kv_heads, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("rows", torch.arange(batch, device=device)[:, None], persistent=False)

    @property
    def max_seq(self) -> int:
        return self.k.shape[1]

    def update(self, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write `k`, `v` ([B, T, kv_heads, head_dim]) at `positions` ([B, T]); return the cache of
        those B sequences. B may be below the allocated batch: the step then uses the first B rows
        (fixed views, so a graph captured at batch B keeps hitting the same memory), which is how
        one cache serves the graphs of every batch size in a capture list."""
        batch = positions.shape[0]
        if batch == self.k.shape[0]:  # the common case: no slicing ops on the eager path
            keys, values, rows = self.k, self.v, self.rows
        else:
            keys, values, rows = self.k[:batch], self.v[:batch], self.rows[:batch]
        keys.index_put_((rows, positions), k)
        values.index_put_((rows, positions), v)
        return keys, values


def causal_mask(positions: torch.Tensor, max_seq: int, group: int = 1) -> torch.Tensor:
    """[B, 1, T*group, max_seq] booleans: query at position p sees cache slots 0..p (indexed by
    position). Each query row is repeated `group` times in a row (t-major): the layout in which
    `model.grouped_attention` folds the query heads sharing a KV head into the rows."""
    slots = torch.arange(max_seq, device=positions.device)
    rows = positions if group == 1 else positions.repeat_interleave(group, dim=1)
    return slots[None, None, None, :] <= rows[:, None, :, None]
