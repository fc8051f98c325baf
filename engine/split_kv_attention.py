"""Split-KV ("flash-decoding") attention for steps of a few tokens: decode, verify, draft steps.

Why a kernel of our own: at batch 1 SDPA's fused kernels parallelise over heads only, 8 KV heads at
llama shapes, so a one-token step leaves most of an H200's 132 SMs idle, and with a boolean mask
they read the whole cache whatever the position. Splitting the cache's slots into chunks gives
(batch x KV heads x chunks) programs, and each stops at the last live slot of its rows, so a step
reads the live part of the cache (its speed against the torch paths: docs/LOG.md). No kernel
library that does this (FlashInfer, flash-attn) is on the machines we run on; Triton is, with
torch on every GPU.

Layout matches `model.grouped_attention`: the G = heads / KV heads query heads sharing a KV head
are folded into query rows (t-major, row = t * G + g), so each program reads its keys and values
once for all of them. The cache is indexed by position, and a query at position p sees slots 0..p:
the causal mask of `kv_cache.causal_mask`, computed here from `positions` instead of read.

Two passes: each (sequence, KV head, row block, chunk) program with a live slot writes its
unnormalised output with its running max and sum (float32); a second kernel merges the live
chunks only. The first version merged every chunk and was slower than SDPA (76 us over 16384
slots). Registered as a torch custom op, so torch.compile keeps it as one opaque call and CUDA
graphs capture it like any kernel; positions are read on the device, so a replay follows them.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: `applies` is False and the model keeps its torch paths
    triton = None

MIN_CHUNK = (
    128  # cache slots per program at least: 16 chunks over 2048 slots -> 128 programs at 8 KV heads
)
MAX_SPLITS = (
    32  # and at most this many chunks (larger ones over long caches): the merge walks them in turn
)
BLOCK_M = 16  # query rows per program, the smallest tl.dot tile
BLOCK_N = 64  # slots per inner step
MAX_ROWS = (
    64  # longer steps (long prompts) keep the torch paths: their rows would need many row blocks
)
ENABLED = True  # benchmarks switch it off to time the torch paths on the same build


def applies(q: torch.Tensor, kv_heads: int) -> bool:
    """Whether the kernel serves a step with queries `q` [B, T, H, D] over a cache of `kv_heads`:
    GPU tensors, a power-of-two head size from 64 (llama's 128 and `small`'s 64; `tiny`'s 16 and
    kimi's 112 keep the torch paths) and at most MAX_ROWS query rows."""
    return ENABLED and triton is not None and serves(tuple(q.shape), q.device.type, kv_heads)


def serves(shape: tuple[int, ...], device_type: str, kv_heads: int) -> bool:
    """The shape and device rule of `applies`, apart from whether Triton is installed."""
    B, T, H, D = shape
    return (
        device_type == "cuda"
        and D in (64, 128, 256)
        and H % kv_heads == 0
        and T * (H // kv_heads) <= MAX_ROWS
    )


def split_kv_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """Causal attention of q [B, T, H, D] over the cache keys/values [B, S, KVH, D] (slot = position)
    for queries at `positions` [B, T]; returns [B, T, H*D] in q's dtype."""
    return torch.ops.ncclprobe.split_kv_attention(q, keys, values, positions)


if triton is not None:

    @triton.jit
    def _chunk_kernel(
        Q,
        K,
        V,
        POS,
        O_PART,
        M_PART,
        L_PART,
        sqb,
        sqt,
        sqh,
        skb,
        sks,
        skh,
        svb,
        svs,
        svh,
        spb,
        spt,
        rows,
        scale,
        KV_HEADS: tl.constexpr,
        GROUP: tl.constexpr,
        SPLITS: tl.constexpr,
        ROWS_PAD: tl.constexpr,
        CHUNK: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        bk, row_block, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        b, kvh = bk // KV_HEADS, bk % KV_HEADS
        r = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = r < rows
        t, g = r // GROUP, r % GROUP
        pos = tl.load(POS + b * spb + t * spt, mask=row_ok, other=-1)
        start = split * CHUNK
        stop = tl.minimum(
            start + CHUNK, tl.max(pos, 0) + 1
        )  # past every row's last live slot: skip
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(
            Q + b * sqb + t[:, None] * sqt + (kvh * GROUP + g)[:, None] * sqh + d[None, :],
            mask=row_ok[:, None],
            other=0.0,
        )
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for n0 in range(start, stop, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            k = tl.load(
                K + b * skb + n[:, None] * sks + kvh * skh + d[None, :],
                mask=(n < stop)[:, None],
                other=0.0,
            )
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            s = tl.where(n[None, :] <= pos[:, None], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing live yet
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m - m_safe)
            v = tl.load(
                V + b * svb + n[:, None] * svs + kvh * svh + d[None, :],
                mask=(n < stop)[:, None],
                other=0.0,
            )
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            l = l * alpha + tl.sum(p, 1)
            m = m_new
        live = (
            tl.full([BLOCK_M], start, tl.int32) < stop
        )  # a chunk past every row's position writes
        part = (bk * SPLITS + split) * ROWS_PAD + r  # nothing; the merge does not read it
        tl.store(O_PART + part[:, None] * HEAD_DIM + d[None, :], acc, mask=live[:, None])
        tl.store(M_PART + part, m, mask=live)
        tl.store(L_PART + part, l, mask=live)

    @triton.jit
    def _merge_kernel(
        O_PART,
        M_PART,
        L_PART,
        OUT,
        POS,
        sob,
        sot,
        soh,
        spb,
        spt,
        rows,
        KV_HEADS: tl.constexpr,
        GROUP: tl.constexpr,
        SPLITS: tl.constexpr,
        ROWS_PAD: tl.constexpr,
        CHUNK: tl.constexpr,
        BLOCK_M: tl.constexpr,
        HEAD_DIM: tl.constexpr,
    ):
        bk, row_block = tl.program_id(0), tl.program_id(1)
        b, kvh = bk // KV_HEADS, bk % KV_HEADS
        r = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
        t = r // GROUP
        pos = tl.load(POS + b * spb + t * spt, mask=r < rows, other=-1)
        live_splits = tl.max(pos, 0) // CHUNK + 1  # the chunks the first kernel wrote, no more
        d = tl.arange(0, HEAD_DIM)
        m_all = tl.full([BLOCK_M], float("-inf"), tl.float32)
        for split in range(0, live_splits):
            m_all = tl.maximum(m_all, tl.load(M_PART + (bk * SPLITS + split) * ROWS_PAD + r))
        m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        total = tl.zeros([BLOCK_M], tl.float32)
        for split in range(0, live_splits):
            part = (bk * SPLITS + split) * ROWS_PAD + r
            weight = tl.exp(tl.load(M_PART + part) - m_safe)  # 0 for a chunk with nothing live
            total += weight * tl.load(L_PART + part)
            acc += weight[:, None] * tl.load(O_PART + part[:, None] * HEAD_DIM + d[None, :])
        out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
        g = r % GROUP
        tl.store(
            OUT + b * sob + t[:, None] * sot + (kvh * GROUP + g)[:, None] * soh + d[None, :],
            out.to(OUT.dtype.element_ty),
            mask=(r < rows)[:, None],
        )

    @torch.library.custom_op("ncclprobe::split_kv_attention", mutates_args=())
    def _split_kv_attention_op(
        q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        q, keys, values = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, keys, values))
        B, T, H, D = q.shape
        slots, kv_heads = keys.shape[1], keys.shape[2]
        group, rows = H // kv_heads, T * (H // kv_heads)
        row_blocks = triton.cdiv(rows, BLOCK_M)
        splits = min(triton.cdiv(slots, MIN_CHUNK), MAX_SPLITS)
        chunk = triton.cdiv(triton.cdiv(slots, splits), BLOCK_N) * BLOCK_N
        rows_pad = row_blocks * BLOCK_M
        o_part = q.new_empty((B * kv_heads, splits, rows_pad, D), dtype=torch.float32)
        m_part = q.new_empty((B * kv_heads, splits, rows_pad), dtype=torch.float32)
        l_part = torch.empty_like(m_part)
        out = q.new_empty((B, T, H * D))
        precision = "ieee" if q.dtype == torch.float32 else "tf32"  # float32 runs stay exact
        _chunk_kernel[(B * kv_heads, row_blocks, splits)](
            q,
            keys,
            values,
            positions,
            o_part,
            m_part,
            l_part,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            keys.stride(0),
            keys.stride(1),
            keys.stride(2),
            values.stride(0),
            values.stride(1),
            values.stride(2),
            positions.stride(0),
            positions.stride(1),
            rows,
            D**-0.5,
            KV_HEADS=kv_heads,
            GROUP=group,
            SPLITS=splits,
            ROWS_PAD=rows_pad,
            CHUNK=chunk,
            BLOCK_M=BLOCK_M,
            BLOCK_N=BLOCK_N,
            HEAD_DIM=D,
            PRECISION=precision,
        )
        _merge_kernel[(B * kv_heads, row_blocks)](
            o_part,
            m_part,
            l_part,
            out,
            positions,
            out.stride(0),
            out.stride(1),
            D,
            positions.stride(0),
            positions.stride(1),
            rows,
            KV_HEADS=kv_heads,
            GROUP=group,
            SPLITS=splits,
            ROWS_PAD=rows_pad,
            CHUNK=chunk,
            BLOCK_M=BLOCK_M,
            HEAD_DIM=D,
        )
        return out

    @_split_kv_attention_op.register_fake
    def _(q, keys, values, positions):
        B, T, H, D = q.shape
        return q.new_empty((B, T, H * D))
