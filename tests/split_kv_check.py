"""Run by tests/test_engine_split_kv.py in a child process with TRITON_INTERPRET=1 (Triton reads it
when the kernels are defined, so the parent's already-imported module cannot switch): the split-KV
kernels, interpreted on the CPU, against SDPA over repeated KV heads with `causal_mask`. Prints one
JSON line per case: its shape and the largest absolute difference."""

import json
import sys

import torch

from ncclprobe.engine.kv_cache import causal_mask
from ncclprobe.engine.split_kv_attention import split_kv_attention


def reference(q, keys, values, positions):
    B, T, H, D = q.shape
    repeat = lambda t: t.repeat_interleave(H // keys.shape[2], dim=2).transpose(1, 2)  # noqa: E731
    y = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2),
        repeat(keys),
        repeat(values),
        attn_mask=causal_mask(positions, keys.shape[1]),
    )
    return y.transpose(1, 2).reshape(B, T, H * D)


def case(gen, batch, tokens, heads, kv_heads, dim, slots, starts, transposed_q):
    keys, values = (torch.randn(batch, slots, kv_heads, dim, generator=gen) for _ in range(2))
    if transposed_q:  # a strided q, as the model's rotated view of the fused qkv output is
        q = torch.randn(batch, heads, tokens, dim, generator=gen).transpose(1, 2)
    else:
        q = torch.randn(batch, tokens, heads, dim, generator=gen)
    positions = torch.stack([torch.arange(tokens) + s for s in starts])
    got = split_kv_attention(q, keys, values, positions)
    error = (got - reference(q, keys, values, positions)).abs().max().item()
    return {
        "batch": batch,
        "tokens": tokens,
        "heads": heads,
        "kv_heads": kv_heads,
        "dim": dim,
        "slots": slots,
        "starts": list(starts),
        "max_abs_error": error,
        "shape": list(got.shape),
    }


def main():
    gen = torch.Generator().manual_seed(0)
    cases = [
        (1, 1, 8, 2, 64, 300, (0,), False),  # the first slot only
        (2, 1, 8, 2, 64, 300, (5, 260), False),  # one chunk against three
        (2, 4, 8, 2, 64, 300, (120, 290), True),  # verify: rows straddling a chunk edge
        (1, 4, 32, 8, 128, 256, (200,), False),  # llama's head layout
        (1, 20, 8, 2, 64, 200, (100,), False),  # 80 rows: more than MAX_ROWS, several row blocks
        (2, 4, 8, 2, 64, 5000, (30, 4990), False),  # a long cache: MAX_SPLITS chunks of 192 slots
    ]
    for args in cases:
        print(json.dumps(case(gen, *args)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
