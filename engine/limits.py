"""What a model's shape allows a run: the positions it reaches, the tensor-parallel sizes it shards
over. Plain arithmetic on a `ModelConfig`, with no torch: the CLI refuses a run the model cannot
serve before torch is imported (12-14 s on a loaded machine, and a `torchinductor_<user>/` left in
TMPDIR by a command that only said no)."""

from __future__ import annotations

from ncclprobe.errors import UsageProblem


def max_positions(prompt_len: int, new_tokens: int, k: int) -> int:
    """Cache slots a run can touch: prompt, new tokens, and the overshoot of the last cycle."""
    return prompt_len + new_tokens + 2 * (k + 2)


def valid_tp_sizes(cfg) -> list[int]:
    """The rank counts this model's shape shards over: each rank must own whole query heads and
    whole key/value heads (KV heads are not replicated) and an equal slice of the MLP width (of
    each expert's, for MoE); SmolLM2-135M (9 query, 3 KV heads) allows 1 and 3."""
    widths = [cfg.heads, cfg.kv_heads, cfg.intermediate] + (
        [cfg.moe.expert_intermediate] if cfg.moe else []
    )
    return [n for n in range(1, cfg.kv_heads + 1) if all(w % n == 0 for w in widths)]


def check_tp_shape(cfg, tp: int) -> None:
    """Refuse, before any worker starts, a --tp the model's shape cannot be sharded over."""
    valid = valid_tp_sizes(cfg)
    if tp not in valid:
        raise UsageProblem(
            f"--tp {tp} cannot shard {cfg.name}: {cfg.heads} query heads, {cfg.kv_heads} key/value "
            f"heads and MLP width {cfg.intermediate} must all divide by it; use --tp "
            f"{' or '.join(map(str, valid))}"
        )
