"""Engine configuration: frozen, validated dataclasses and the presets, as plain functions.

A preset is a function returning a `ModelConfig`; `preset(name)` looks one up by its CLI name.
Every field says its unit; validation raises `UsageProblem` with a sentence naming the value, so
a bad preset or checkpoint config reaches the user as one line (exit 2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ncclprobe.errors import UsageProblem


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageProblem(message)


@dataclass(frozen=True, kw_only=True)
class MoEConfig:
    """Mixture-of-experts layers in the DeepSeek-V3 / Kimi-K2 arrangement."""

    experts: int  # routed experts per MoE layer
    top_k: int  # routed experts each token uses
    expert_intermediate: int  # SwiGLU width of one expert (and of each shared expert)
    shared_experts: int = 1  # always-on experts per MoE layer
    dense_layers: int = 1  # the first `dense_layers` layers keep the dense MLP
    route_scale: float = 1.0  # multiplies the normalised routing weights (DeepSeek-V3: 2.5)

    def __post_init__(self):
        _require(
            self.experts >= 1 and 1 <= self.top_k <= self.experts,
            f"MoE needs 1 <= top_k <= experts, got top_k={self.top_k}, experts={self.experts}",
        )
        _require(
            self.expert_intermediate >= 1 and self.shared_experts >= 0 and self.dense_layers >= 0,
            f"MoE widths and counts must be positive, got {self}",
        )


@dataclass(frozen=True, kw_only=True)
class RopeScaling:
    """Llama-3.1's frequency-dependent RoPE scaling (`rope_type: llama3` in config.json)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position: int


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU), optionally with MoE layers."""

    name: str  # preset name or checkpoint directory, for reports
    vocab: int  # tokens
    hidden: int  # residual width
    layers: int  # decoder layers
    heads: int  # query heads
    kv_heads: int  # key/value heads (GQA: heads % kv_heads == 0)
    intermediate: int  # dense SwiGLU width
    head_dim: int = 0  # 0: hidden // heads
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    norm_eps: float = 1e-5
    tie_embeddings: bool = False  # output head shares the embedding matrix
    moe: MoEConfig | None = None
    capture_layers: tuple[
        int, ...
    ] = ()  # layers whose *input* feeds the draft; () = EAGLE-3 default
    max_positions: int | None = None  # the context length it serves (a checkpoint's
    # max_position_embeddings; a preset's real model's); None: unknown

    def __post_init__(self):
        for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate"):
            _require(
                getattr(self, name) >= 1,
                f"model {self.name}: {name} must be positive, got {getattr(self, name)}",
            )
        _require(
            self.heads % self.kv_heads == 0,
            f"model {self.name}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})",
        )
        if not self.head_dim:
            _require(
                self.hidden % self.heads == 0,
                f"model {self.name}: hidden ({self.hidden}) must divide by heads ({self.heads})",
            )
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        _require(
            self.head_dim % 2 == 0,
            f"model {self.name}: head_dim must be even for RoPE, got {self.head_dim}",
        )
        if not self.capture_layers:
            object.__setattr__(self, "capture_layers", eagle3_capture_layers(self.layers))
        _require(
            len(self.capture_layers) == 3
            and all(0 <= i < self.layers for i in self.capture_layers),
            f"model {self.name}: capture_layers must be 3 layer indices below {self.layers}, "
            f"got {self.capture_layers}",
        )
        _require(
            self.max_positions is None or self.max_positions >= 1,
            f"model {self.name}: max_positions must be positive, got {self.max_positions}",
        )

    def is_moe_layer(self, index: int) -> bool:
        return self.moe is not None and index >= self.moe.dense_layers

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["moe_enabled"] = self.moe is not None
        return doc

    def summary(self) -> dict:
        """The trace's `config.model`: the numbers a reader needs to size the collectives and the
        bytes a step moves (diagnose's expected verify/decode ratio reads the widths and MoE counts;
        without them it falls back to Llama rules, which are wrong for MoE experts)."""
        moe = self.moe
        return {
            "name": self.name,
            "hidden": self.hidden,
            "layers": self.layers,
            "vocab": self.vocab,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate": self.intermediate,
            "moe": moe is not None,
            "experts": moe.experts if moe else None,
            "top_k": moe.top_k if moe else None,
            "expert_intermediate": moe.expert_intermediate if moe else None,
            "shared_experts": moe.shared_experts if moe else None,
            "dense_layers": moe.dense_layers if moe else None,
        }


def eagle3_capture_layers(layers: int) -> tuple[int, int, int]:
    """EAGLE-3/SGLang/vLLM take the inputs of layers 2, L//2 and L-3; clamped for tiny models."""
    return (min(2, layers - 1), layers // 2, max(layers - 3, 0))


@dataclass(frozen=True, kw_only=True)
class DraftConfig:
    """An EAGLE-3 draft head: fc (3H->H), one decoder layer with a 2H attention input, a head."""

    target_hidden: int  # width of each captured target feature (3 are concatenated)
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int  # draft vocabulary (<= target vocab; mapped back through d2t)
    target_vocab: int
    head_dim: int = 0
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    norm_eps: float = 1e-5

    def __post_init__(self):
        _require(
            1 <= self.vocab <= self.target_vocab,
            f"draft vocabulary must be between 1 and the target's {self.target_vocab}, got {self.vocab}",
        )
        _require(
            self.heads % self.kv_heads == 0,
            f"draft heads ({self.heads}) must be a multiple of kv_heads",
        )
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @classmethod
    def for_target(cls, target: ModelConfig, vocab: int | None = None) -> DraftConfig:
        """The draft EAGLE-3 pairs with a target: same width and attention shape as the target."""
        return cls(
            target_hidden=target.hidden,
            hidden=target.hidden,
            heads=target.heads,
            kv_heads=target.kv_heads,
            intermediate=target.intermediate,
            head_dim=target.head_dim,
            vocab=vocab or target.vocab,
            target_vocab=target.vocab,
            rope_theta=target.rope_theta,
            rope_scaling=target.rope_scaling,
            norm_eps=target.norm_eps,
        )

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> DraftConfig:
        doc = dict(doc)
        if doc.get("rope_scaling"):
            doc["rope_scaling"] = RopeScaling(**doc["rope_scaling"])
        return cls(**doc)


# ---------------------------------------------------------------- presets


def tiny() -> ModelConfig:
    """CPU tests in seconds: 4 layers of width 64, vocabulary 256."""
    return ModelConfig(
        name="tiny",
        vocab=256,
        hidden=64,
        layers=4,
        heads=4,
        kv_heads=2,
        intermediate=128,
        capture_layers=(1, 2, 3),
        max_positions=4096,
    )


def tiny_moe() -> ModelConfig:
    """`tiny` with MoE from layer 1 on: 8 experts, 2 per token, one shared expert."""
    return ModelConfig(
        name="tiny-moe",
        vocab=256,
        hidden=64,
        layers=4,
        heads=4,
        kv_heads=2,
        intermediate=128,
        capture_layers=(1, 2, 3),
        max_positions=4096,
        moe=MoEConfig(experts=8, top_k=2, expert_intermediate=32, shared_experts=1, dense_layers=1),
    )


def small() -> ModelConfig:
    """About 1B parameters, dense (Llama-3.2-1B's body with a 32K vocabulary): one GPU."""
    return ModelConfig(
        name="small",
        vocab=32000,
        hidden=2048,
        layers=16,
        heads=32,
        kv_heads=8,
        intermediate=8192,
        rope_theta=500000.0,
        max_positions=8192,
    )


def llama_16l() -> ModelConfig:
    """The reference shape of ../shared/reference/h200-measurements.md: Llama-3-8B's layer with 16
    layers and a 32K vocabulary (7.50 GB of bf16 weights), for the speed comparisons there."""
    return ModelConfig(
        name="llama-16l",
        vocab=32000,
        hidden=4096,
        layers=16,
        heads=32,
        kv_heads=8,
        intermediate=14336,
        rope_theta=500000.0,
        max_positions=8192,
    )


def llama3_8b() -> ModelConfig:
    """The real Llama-3-8B shape (random weights unless a checkpoint is given)."""
    return ModelConfig(
        name="llama3-8b",
        vocab=128256,
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        intermediate=14336,
        rope_theta=500000.0,
        max_positions=8192,
    )


def kimi_k2_slice() -> ModelConfig:
    """Three layers of Kimi-K2 at full width: 1 dense + 2 MoE layers, so it fits one H200 in bf16.

    Per layer, what matters for collectives and decode cost is real: hidden 7168 (so each TP
    all-reduce moves tokens x 7168 elements), 384 routed experts of width 2048 with 8 per token
    plus one shared expert, dense MLP width 18432, vocabulary 163840. Where it differs from Kimi-K2:
    grouped-query attention (64 query heads, 8 KV heads, head_dim 112) in place of MLA; 3 layers
    instead of 61; sigmoid top-k routing without expert groups or bias correction; the decode path
    gathers the chosen experts' weights (graph-safe, static shapes) which copies them once more
    than a grouped-GEMM kernel would.
    """
    return ModelConfig(
        name="kimi-k2-slice",
        vocab=163840,
        hidden=7168,
        layers=3,
        heads=64,
        kv_heads=8,
        intermediate=18432,
        rope_theta=50000.0,
        capture_layers=(0, 1, 2),
        max_positions=131072,
        moe=MoEConfig(
            experts=384,
            top_k=8,
            expert_intermediate=2048,
            shared_experts=1,
            dense_layers=1,
            route_scale=2.827,
        ),
    )


PRESETS = {
    "tiny": tiny,
    "tiny-moe": tiny_moe,
    "small": small,
    "llama-16l": llama_16l,
    "llama3-8b": llama3_8b,
    "kimi-k2-slice": kimi_k2_slice,
}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise UsageProblem(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]()
