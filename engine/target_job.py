"""train-target from options to a checked checkpoint: train a preset-shaped target on the
synthetic chain (`train_target`), save it as a Hugging Face Llama directory, reload it as
run-engine does and check its greedy decoding (`ncclprobe train-target` is a thin layer over it).

Why a trained target: speculative decoding only pays when a draft can learn the target's next
token, and random preset weights make it a hash of the context (docs/LOG.md). Every figure
measured with such a target is labelled `LABEL`. Keep run-engine's --prompt-len + --new-tokens +
k within the trained positions (`trained_positions`): past them the target no longer follows the
chain, and a draft trained by train-draft has its own limit (its --gen-len).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ncclprobe.engine.train_target import TargetTrainSpec
from ncclprobe.errors import UsageProblem

LABEL = "target trained on a synthetic corpus (order-2 Markov chain), not a real language model"


@dataclass(frozen=True, kw_only=True)
class GreedyCheck:
    """How the saved checkpoint is checked: `prompts` random full-vocabulary prompts of
    `prompt_len` tokens, `tokens` greedy tokens each (None: up to the trained positions)."""

    prompts: int = 16
    prompt_len: int = 16  # run-engine's default prompt length
    tokens: int | None = None

    def resolved(self, spec: TargetTrainSpec) -> GreedyCheck:
        tokens = self.tokens or spec.seq_len - self.prompt_len - 1
        if (
            self.prompts < 1
            or self.prompt_len < 2
            or tokens < 1
            or self.prompt_len + tokens >= spec.seq_len
        ):
            raise UsageProblem(
                f"the greedy check needs --check-prompts >= 1, --check-prompt-len >= 2 and prompt + "
                f"tokens below the trained {spec.seq_len} positions, got {self.prompts} prompts of "
                f"{self.prompt_len} + {tokens}"
            )
        return GreedyCheck(prompts=self.prompts, prompt_len=self.prompt_len, tokens=tokens)


def train_and_save_target(
    preset_name: str,
    spec: TargetTrainSpec,
    out: str | Path,
    *,
    device: str = "cpu",
    check: GreedyCheck = GreedyCheck(),
    force: bool = False,
    progress=None,
) -> dict:
    """Train, save to `out` (whole or not at all; an earlier checkpoint there only with `force`),
    reload and check: the figures (`figures`)."""
    from ncclprobe.engine.config import preset
    from ncclprobe.engine.hf_loader import save_hf_checkpoint
    from ncclprobe.engine.synthetic_corpus import MarkovChain, greedy_walk
    from ncclprobe.engine.train_target import build_trainable, train_target
    from ncclprobe.safe_output import atomic_directory

    check = check.resolved(spec)
    model = build_trainable(preset(preset_name), seed=spec.seed, device=device)
    report = train_target(model, spec, progress=progress)
    with atomic_directory(out, force=force, what="--output") as directory:
        save_hf_checkpoint(
            model,
            directory,
            max_positions=spec.seq_len,
            extra_config={"ncclprobe_synthetic_target": {"label": LABEL, **report["spec"]}},
        )
    report["greedy_agreement"] = check_saved(Path(out), spec, check, device)
    report["greedy_walk"] = greedy_walk(MarkovChain(spec.chain(model.cfg.vocab)))
    return figures(preset_name, Path(out), spec, report, check)


def check_saved(directory: Path, spec: TargetTrainSpec, check: GreedyCheck, device: str) -> float:
    """Reload the checkpoint as run-engine does and decode random full-vocabulary prompts greedily:
    the share of tokens that are the chain's most likely successor."""
    import torch

    from ncclprobe.engine.build import random_prompts
    from ncclprobe.engine.hf_loader import load_checkpoint
    from ncclprobe.engine.synthetic_corpus import MarkovChain
    from ncclprobe.engine.train_target import greedy_agreement

    target = load_checkpoint(
        directory, device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32
    )
    chain = MarkovChain(spec.chain(target.cfg.vocab), device)
    prompts = random_prompts(
        target.cfg.vocab, check.prompts, check.prompt_len, spec.seed + 3, device
    )
    assert check.tokens is not None, "resolve the check first (GreedyCheck.resolved)"
    return greedy_agreement(target, chain, prompts, check.tokens)


def figures(name: str, out: Path, spec: TargetTrainSpec, report: dict, check: GreedyCheck) -> dict:
    """The figures to print: besides the loss against its floor (the chain's entropy) and the argmax
    agreement on held-out chain text, the greedy agreement of the reloaded checkpoint after random
    prompts, and where greedy decoding of this chain ends up (`greedy_cycles`, cycle length:share of
    start states; `greedy_mean_tail`): past its tail the output repeats a cycle, which a draft learns,
    so state the cycle beside any acceptance. The first two tokens after a random prompt are argmaxes
    over a nearly flat distribution (the chain starts uniformly): no draft predicts them, and in bf16
    they are near-ties, so speculative output may leave the baseline's there."""
    return {
        "preset": name,
        "checkpoint": str(out),
        "device": report["device"],
        "steps": report["steps"],
        "tokens_seen": report["tokens_seen"],
        "trained_positions": spec.seq_len,
        "active_vocab": spec.active_vocab,
        "loss_first_nats": round(report["loss_first"], 4),
        "loss_last_nats": round(report["loss_last"], 4),
        "heldout_loss_nats": round(report["eval_loss"], 4),
        "entropy_bound_nats": round(report["entropy_bound"], 4),
        "chain_entropy_nats": round(report["chain_entropy"], 4),
        "argmax_agreement": round(report["argmax_agreement"], 4),
        "greedy_agreement_random_prompts": round(report["greedy_agreement"], 4),
        "greedy_check": f"{check.prompts} prompts of {check.prompt_len} + {check.tokens} tokens",
        "greedy_cycles": " ".join(
            f"{c['length']}:{c['share']:.3f}" for c in report["greedy_walk"]["cycles"][:5]
        ),
        "greedy_mean_tail": round(report["greedy_walk"]["mean_tail"], 1),
        "train_seconds": round(report["train_seconds"], 1),
        "train_tokens_per_s": round(report["tokens_per_s"]),
    }
