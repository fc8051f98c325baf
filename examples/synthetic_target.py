"""Train a preset-shaped target on a synthetic language and save it as a local HF Llama checkpoint.

Why: the speculative-speed target ("with a trained draft reaching an acceptance length of 2.5 or
more: at least 1.8x the baseline's tokens/s") needs a target whose next token a draft can learn.
Random preset weights make the greedy token a hash of the context (acceptance 1.02 on `small`,
docs/LOG.md) and no real checkpoint is available offline. So the target itself is trained briefly
on a seeded order-2 Markov chain (engine/synthetic_corpus.py) whose training sequences open with
random full-vocabulary tokens, like the prompts of train-draft and run-engine. Every figure
measured with it must be labelled "target trained on a synthetic corpus".

  python examples/synthetic_target.py --preset small --out small-chain --device cuda   # 61 s on one H200
  python examples/synthetic_target.py --preset tiny --out tiny-chain                   # ~1 min on a CPU
  python examples/synthetic_target.py --preset llama-16l --batch 16 --out l16-chain --device cuda   # 91 s

then, with the same directory:

  ncclprobe train-draft --checkpoint small-chain --out small-chain-draft.safetensors --gen-len 272 --draft-vocab 8000
  ncclprobe run-engine --checkpoint small-chain --draft small-chain-draft.safetensors --graphs all --compile \
      --new-tokens 256

Keep run-engine's --prompt-len + --new-tokens + k within the trained positions (--seq-len, printed
as `trained_positions`): the target has never seen positions beyond them, and on `tiny` its greedy
tokens stop following the chain right there. The draft has the same limit: train-draft's default
sequences (8 + 56 tokens) teach it positions below 64, and on the H200 its acceptance with this
target was 4.00 in a 64-token run but 2.50 in a 256-token one; with --gen-len 272 the 256-token run
reached 3.91 (docs/LOG.md). Give train-draft a --gen-len that covers the run.

Figures go to stdout (one `name value` per line), progress to stderr. Besides the loss against
its floor (the chain's entropy) and the argmax agreement on held-out chain text, the script
reloads the saved checkpoint as run-engine does and decodes random full-vocabulary prompts
greedily (`greedy_agreement_random_prompts`), and prints where greedy decoding of this chain ends
up (`greedy_cycles`: cycle length:share of start states; `greedy_mean_tail`): after its tail the
greedy output repeats a cycle, which a draft learns, so state the cycle next to any acceptance.
The first two tokens after a random prompt are the target's argmax over a nearly flat distribution
(the chain starts uniformly): a draft cannot predict them, and in bf16 they are near-ties, so the
speculative output may leave the baseline's there (run-engine reports, not fails, that in bf16).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from ncclprobe.engine.build import random_prompts
from ncclprobe.engine.config import preset
from ncclprobe.engine.hf_loader import load_checkpoint, save_hf_checkpoint
from ncclprobe.engine.synthetic_corpus import MarkovChain, greedy_walk
from ncclprobe.engine.train_target import build_trainable, default_spec, greedy_agreement, train_target
from ncclprobe.errors import UsageProblem

LABEL = "target trained on a synthetic corpus (order-2 Markov chain), not a real language model"
OVERRIDES = ("steps", "batch", "seq_len", "lr", "warmup", "active_vocab", "top_prob", "seed")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small", help="dense preset to shape the target like")
    parser.add_argument("--out", required=True, help="checkpoint directory to create")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--steps", type=int)
    parser.add_argument("--batch", type=int, help="sequences per step")
    parser.add_argument("--seq-len", type=int, help="tokens per training sequence")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--warmup", type=int, help="warmup steps")
    parser.add_argument("--active-vocab", type=int, help="tokens the chain moves between")
    parser.add_argument("--top-prob", type=float, help="probability of each context's most likely successor")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--check-prompts", type=int, default=16, help="random prompts for the greedy check")
    parser.add_argument("--check-prompt-len", type=int, default=16, help="their length (run-engine's default)")
    parser.add_argument("--check-tokens", type=int,
                        help="greedy tokens per prompt (default: up to the trained positions)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = "cpu" if device == "auto" else device
    chosen = {name: getattr(args, name) for name in OVERRIDES if getattr(args, name) is not None}
    spec = dataclasses.replace(default_spec(args.preset), **chosen)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise UsageProblem(f"{out} exists and is not empty; choose another directory")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageProblem("--device cuda was requested but torch sees no CUDA GPU")
    args.check_tokens = args.check_tokens or spec.seq_len - args.check_prompt_len - 1
    if args.check_prompt_len < 2 or args.check_tokens < 1 or args.check_prompt_len + args.check_tokens >= spec.seq_len:
        raise UsageProblem(f"the greedy check needs --check-prompt-len >= 2 and prompt + tokens below the trained "
                           f"{spec.seq_len} positions, got {args.check_prompt_len} + {args.check_tokens}")
    model = build_trainable(preset(args.preset), seed=spec.seed, device=device)
    print(f"training {args.preset} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M weights) on {device}: "
          f"{spec.steps} steps x {spec.batch} x {spec.seq_len} tokens", file=sys.stderr)
    report = train_target(model, spec, progress=lambda step, steps, loss: print(
        f"  step {step}/{steps} loss {loss:.3f}", file=sys.stderr))
    save_hf_checkpoint(model, out, max_positions=spec.seq_len,
                       extra_config={"ncclprobe_synthetic_target": {"label": LABEL, **report["spec"]}})
    report["greedy_agreement"] = check_saved(out, spec, args, device)
    report["greedy_walk"] = greedy_walk(MarkovChain(spec.chain(model.cfg.vocab)))
    print_figures(args.preset, out, spec, report)
    return 0


def check_saved(directory: Path, spec, args, device) -> float:
    """Reload the checkpoint as run-engine does and decode random full-vocabulary prompts greedily:
    the share of tokens that are the chain's most likely successor."""
    tokens = args.check_tokens
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    target = load_checkpoint(directory, device=device, dtype=dtype)
    chain = MarkovChain(spec.chain(target.cfg.vocab), device)
    prompts = random_prompts(target.cfg.vocab, args.check_prompts, args.check_prompt_len, spec.seed + 3, device)
    started = time.perf_counter()
    share = greedy_agreement(target, chain, prompts, tokens)
    print(f"greedy check: {args.check_prompts} prompts of {args.check_prompt_len} x {tokens} tokens in "
          f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    return share


def print_figures(name: str, out: Path, spec, report: dict) -> None:
    print(f"# {LABEL}")
    figures = {"preset": name, "checkpoint": str(out), "device": report["device"], "steps": report["steps"],
               "tokens_seen": report["tokens_seen"], "trained_positions": spec.seq_len,
               "active_vocab": spec.active_vocab, "loss_first_nats": round(report["loss_first"], 4),
               "loss_last_nats": round(report["loss_last"], 4), "heldout_loss_nats": round(report["eval_loss"], 4),
               "entropy_bound_nats": round(report["entropy_bound"], 4),
               "chain_entropy_nats": round(report["chain_entropy"], 4),
               "argmax_agreement": round(report["argmax_agreement"], 4),
               "greedy_agreement_random_prompts": round(report["greedy_agreement"], 4),
               "greedy_cycles": " ".join(f"{c['length']}:{c['share']:.3f}"
                                         for c in report["greedy_walk"]["cycles"][:5]),
               "greedy_mean_tail": round(report["greedy_walk"]["mean_tail"], 1),
               "train_seconds": round(report["train_seconds"], 1), "train_tokens_per_s": round(report["tokens_per_s"])}
    for key, value in figures.items():
        print(f"{key} {value}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
