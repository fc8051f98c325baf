"""What a verify step should cost relative to a decode step, from the model shape.

Derivation. At small batch a decode step is bound by memory bandwidth, not arithmetic: every
weight byte is read once per step, whatever the number of tokens in it. A matmul over n tokens
does 2 flops per weight per token against 2 bytes per bf16 weight, an arithmetic intensity of
about n flop/byte; an H200 needs about 200 flop/byte (≈1 PFLOP/s over ≈4.8 TB/s) before compute
dominates, so up to a few dozen tokens a step costs what its bytes cost. A verify step runs k+1
tokens per sequence through the same weights, so its cost over a decode step is the ratio of the
bytes the two steps move:

    bytes(step of n tokens per sequence, batch B) =
        dense weights (attention, dense MLPs, output head)          read once per step
      + routed expert weights × distinct experts touched by B·n tokens   (MoE layers only)
      + KV cache of every sequence (layers × 2 × kv_dim × context)   read once per sequence:
                                                                       the k+1 queries share it
      + activations, B·n × layers × (≈8·hidden + 3·intermediate)     per token, small

Distinct experts touched by t tokens, each picking `top_k` of E experts, assuming independent
uniform routing: E·(1 − (1 − top_k/E)^t). Real routing is correlated, so this is an upper bound on
the experts a verify step adds; with many experts (Kimi-K2: 8 of 384) it is the term that makes a
MoE verify cost more than its decode step, with few it is about 1×.

The expected ratio is bytes(k+1)/bytes(1); the measured decode step turns it into milliseconds
(expected verify ms = ratio × decode ms). Fixed per-step costs (kernel launches, Python) only pull
the real ratio closer to 1, so this is a ceiling for a well-implemented engine. A plain PyTorch
implementation loses some more in its masked attention path at k+1 query rows: 1.27× on the H200
for a 16-layer Llama shape (../shared/reference/h200-measurements.md), hence the 1.5× allowance
(`ALLOWANCE`) before diagnose calls a ratio "far above".

The trace's config.model carries the shape; fields it lacks are filled with Llama conventions
(intermediate ≈ 8/3·hidden rounded to 256, kv heads = heads) and named in `assumptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.dtypes import element_bytes

ALLOWANCE = 1.5
# A decode step that moves its weights slower than this is bound by per-step overheads (launches,
# Python, collective latency), not by bandwidth: a tiny model on a CPU runs at MB/s, a GPU decode
# step of a real model at hundreds of GB/s. Below it the bytes ratio predicts nothing.
BANDWIDTH_BOUND_GBPS = 100.0

_ALIASES = {
    "intermediate": ("intermediate", "intermediate_size", "mlp_hidden", "ffn"),
    "heads": ("heads", "n_heads", "num_heads", "num_attention_heads"),
    "kv_heads": ("kv_heads", "n_kv_heads", "num_kv_heads", "num_key_value_heads"),
    "experts": ("experts", "n_experts", "num_experts", "n_routed_experts"),
    "top_k": ("experts_per_token", "top_k", "topk", "num_experts_per_tok"),
    "expert_intermediate": ("expert_intermediate", "moe_intermediate", "moe_intermediate_size"),
    "shared_experts": ("shared_experts", "n_shared_experts"),
    "head_dim": ("head_dim",),
    "dense_layers": ("dense_layers", "first_dense", "first_k_dense_replace", "n_dense_layers"),
}


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    vocab: int
    intermediate: int
    heads: int
    kv_heads: int
    moe: bool = False
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    head_dim: int = 0  # 0: hidden // heads
    assumptions: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def from_config(cls, model: dict) -> ModelShape:
        if isinstance(model.get("moe"), dict):  # nested MoE block: flatten it, keep "moe" truthy
            model = {**model, **model["moe"], "moe": True}
        hidden, layers, vocab = (
            int(model["hidden"]),
            int(model["layers"]),
            int(model.get("vocab") or 0),
        )
        got: dict[str, int | None] = {}
        assumed = []
        for name, keys in _ALIASES.items():
            got[name] = next((int(model[k]) for k in keys if model.get(k) is not None), None)
        intermediate, heads, kv_heads = got["intermediate"], got["heads"], got["kv_heads"]
        if intermediate is None:
            intermediate = _llama_intermediate(hidden)
            assumed.append(f"MLP width {intermediate} (Llama rule 8/3·hidden; not in the trace)")
        if heads is None:
            heads = max(1, hidden // 128)
            assumed.append(f"{heads} attention heads of 128 (not in the trace)")
        if kv_heads is None:
            kv_heads = heads
            assumed.append("as many KV heads as query heads (not in the trace)")
        moe = bool(model.get("moe"))
        if moe and not got["experts"]:
            assumed.append("MoE without expert counts in the trace: experts treated as dense MLPs")
            moe = False
        return cls(
            hidden=hidden,
            layers=layers,
            vocab=vocab,
            intermediate=intermediate,
            heads=heads,
            kv_heads=kv_heads,
            moe=moe,
            experts=got["experts"] or 0,
            top_k=got["top_k"] or (1 if moe else 0),
            expert_intermediate=got["expert_intermediate"] or intermediate,
            shared_experts=got["shared_experts"] or 0,
            dense_layers=got["dense_layers"] or 0,
            head_dim=got["head_dim"] or 0,
            assumptions=tuple(assumed),
        )

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.head_dim or self.hidden // self.heads)

    def attention_params(self) -> int:
        q_dim = self.heads * (self.head_dim or self.hidden // self.heads)
        return 2 * self.hidden * q_dim + 2 * self.hidden * self.kv_dim  # q, o + k, v

    def moe_layers(self) -> int:
        return max(0, self.layers - self.dense_layers) if self.moe else 0


def _llama_intermediate(hidden: int) -> int:
    return max(256, int(round(8 * hidden / 3 / 256)) * 256)


def distinct_experts(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts `tokens` tokens touch under independent uniform top-k routing."""
    if experts <= 0 or top_k <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def step_bytes(
    shape: ModelShape, *, batch: int, tokens_per_seq: int, context: int, dtype_bytes: int
) -> dict:
    """Bytes a step moves, by kind (see the module docstring for each term)."""
    tokens = batch * tokens_per_seq
    dense_mlp_layers = shape.layers - shape.moe_layers()
    dense = (
        shape.layers * shape.attention_params()
        + dense_mlp_layers * 3 * shape.hidden * shape.intermediate
    )
    dense += shape.vocab * shape.hidden  # output head; embedding rows read are negligible
    expert = 3 * shape.hidden * shape.expert_intermediate
    routed = shape.moe_layers() * distinct_experts(shape.experts, shape.top_k, tokens) * expert
    shared = shape.moe_layers() * (shape.shared_experts * expert + shape.hidden * shape.experts)
    kv = batch * shape.layers * 2 * shape.kv_dim * context
    acts = tokens * shape.layers * (8 * shape.hidden + 3 * shape.intermediate)
    parts = {
        "dense_weights": dense + shared,
        "routed_experts": routed,
        "kv_cache": kv,
        "activations": acts,
    }
    return {k: v * dtype_bytes for k, v in parts.items()}


@dataclass(frozen=True)
class Expectation:
    ratio: float  # expected verify/decode time ratio (bytes ratio)
    limit: float  # ratio above which diagnose calls it "far above"
    decode_bytes: dict
    verify_bytes: dict
    assumptions: tuple[str, ...]

    def decode_gbps(self, decode_ms: float, tp: int) -> float:
        """Bytes per second one rank's decode step achieves (each rank reads 1/tp of the weights)."""
        return (
            sum(self.decode_bytes.values()) / max(tp, 1) / (decode_ms / 1e3) / 1e9
            if decode_ms
            else 0.0
        )

    def applies(self, decode_ms: float, tp: int) -> bool:
        """Whether the bandwidth-bound premise holds for this measured decode step."""
        return self.decode_gbps(decode_ms, tp) >= BANDWIDTH_BOUND_GBPS

    def to_json(self) -> dict:
        return {
            "expected_ratio": round(self.ratio, 3),
            "limit_ratio": round(self.limit, 3),
            "decode_bytes": {k: int(v) for k, v in self.decode_bytes.items()},
            "verify_bytes": {k: int(v) for k, v in self.verify_bytes.items()},
            "assumptions": list(self.assumptions),
        }


def _whole(value: object) -> int | None:
    """A count from a config someone else wrote: a whole number in 64 bits, else unknown."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        return None
    return value


def _numbers_of(model: object) -> dict:
    """A model config's counts (and its MoE block's): a value of another type (`"hidden": "x"`) is
    left out, as a count the config does not give."""
    if not isinstance(model, dict):
        return {}
    out: dict[str, object] = {k: _whole(v) for k, v in model.items() if _whole(v) is not None}
    if model.get("moe"):
        out["moe"] = _numbers_of(model["moe"]) if isinstance(model["moe"], dict) else True
    return out


def expected_verify_ratio(config: dict) -> Expectation | None:
    """The expected verify/decode ratio for a trace's config, or None without a model shape."""
    model = _numbers_of(config.get("model"))
    if not model.get("hidden") or not model.get("layers"):
        return None
    shape = ModelShape.from_config(model)
    dtype = str(config.get("dtype") or "bfloat16").replace("torch.", "")
    common = dict(
        batch=_whole(config.get("batch")) or 1,
        dtype_bytes=element_bytes(dtype) or 2,
        context=int(
            (_whole(config.get("prompt_len")) or 0) + (_whole(config.get("new_tokens")) or 0) / 2
        )
        or 1,
    )
    decode = step_bytes(shape, tokens_per_seq=1, **common)
    verify = step_bytes(shape, tokens_per_seq=(_whole(config.get("k")) or 1) + 1, **common)
    ratio = sum(verify.values()) / sum(decode.values())
    return Expectation(
        ratio=ratio,
        limit=ratio * ALLOWANCE,
        decode_bytes=decode,
        verify_bytes=verify,
        assumptions=shape.assumptions,
    )
