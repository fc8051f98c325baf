"""The split-KV attention kernel, run through Triton's interpreter on the CPU against SDPA: every
shape it serves in the engine (decode, verify, several sequences at different lengths, chunk
edges, strided queries, a long cache). Skipped where Triton is not installed. The GPU test below
checks the compiled kernel against SDPA and under a CUDA-graph replay; tests/test_engine_gpu.py
checks it inside the engine (graph and eager tokens equal)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ncclprobe.engine import split_kv_attention as split_kv

pytest.importorskip("triton")


def test_interpreted_kernel_equals_sdpa_with_the_causal_mask():
    env = dict(os.environ, TRITON_INTERPRET="1")
    script = Path(__file__).with_name("split_kv_check.py")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cases = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(cases) == 6
    for c in cases:
        assert c["shape"] == [c["batch"], c["tokens"], c["heads"] * c["dim"]]
        assert c["max_abs_error"] < 1e-4, c


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_kernel_equals_sdpa_and_replays_in_a_cuda_graph(dtype):
    from ncclprobe.engine.kv_cache import causal_mask

    gen = torch.Generator(device="cuda").manual_seed(0)
    heads, kv_heads, dim, slots = 32, 8, 128, 2048
    keys, values = (
        torch.randn(2, slots, kv_heads, dim, device="cuda", dtype=dtype, generator=gen)
        for _ in range(2)
    )
    repeat = lambda t: t.repeat_interleave(heads // kv_heads, dim=2).transpose(1, 2).float()  # noqa: E731
    for tokens in (1, 4):
        q = torch.randn(2, tokens, heads, dim, device="cuda", dtype=dtype, generator=gen)
        positions = torch.stack(
            [torch.arange(tokens, device="cuda") + s for s in (7, 2040 - tokens)]
        )
        want = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2).float(),
            repeat(keys),
            repeat(values),
            attn_mask=causal_mask(positions, slots),
        )
        want = want.transpose(1, 2).reshape(2, tokens, heads * dim)
        got = split_kv.split_kv_attention(q, keys, values, positions)
        tolerance = 1e-4 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got.float(), want, atol=tolerance, rtol=tolerance)
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            replayed = split_kv.split_kv_attention(q, keys, values, positions)
        positions -= 5  # a replay reads the new positions from the same tensor
        graph.replay()
        eager = split_kv.split_kv_attention(q, keys, values, positions)
        torch.testing.assert_close(replayed, eager, atol=0, rtol=0)
