"""`ncclprobe train-draft`: train an EAGLE-3 draft for a preset by self-distillation."""

from __future__ import annotations

from pathlib import Path

import click

from ncclprobe.cli.output import Progress, emit, format_option
from ncclprobe.cli.run_engine import PRESET_NAMES
from ncclprobe.errors import UsageProblem

EPILOG = """\b
Examples:
  ncclprobe train-draft --preset tiny --out tiny-draft.safetensors
  ncclprobe train-draft --preset small --steps 2000 --sequences 512 --out small-draft.safetensors
  ncclprobe run-engine --preset tiny --draft tiny-draft.safetensors

Exit codes: 0 trained and saved, 1 acceptance did not rise, 2 bad options, 4 internal error."""


@click.command(epilog=EPILOG, short_help="Train an EAGLE-3 draft head on the target's own outputs.")
@click.option("--preset", default="tiny", show_default=True, type=click.Choice(PRESET_NAMES), help="Target model shape.")
@click.option("--checkpoint", type=click.Path(file_okay=False), help="Local Hugging Face Llama directory (overrides --preset).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Draft file to write (.safetensors); never overwritten.")
@click.option("--steps", default=1000, show_default=True, type=int, help="Optimiser steps.")
@click.option("--sequences", default=512, show_default=True, type=int, help="Training sequences the target generates.")
@click.option("--prompt-len", default=8, show_default=True, type=int, help="Random prompt tokens per sequence.")
@click.option("--gen-len", default=56, show_default=True, type=int, help="Tokens the target generates per sequence; prompt + these are the positions the draft "
                   "learns, so cover the runs it will serve (run-engine warns when a run goes beyond).")
@click.option("--batch", default=16, show_default=True, type=int, help="Sequences per optimiser step.")
@click.option("--unroll", default=3, show_default=True, type=int, help="Training-time-test depth.")
@click.option("--labels", default="mixed", show_default=True, type=click.Choice(("soft", "hard", "mixed")),
              help="Train against the target's distribution, its greedy choice, or the mean of both losses.")
@click.option("--lr", default=3e-3, show_default=True, type=float, help="AdamW learning rate.")
@click.option("--draft-vocab", default=0, show_default=True, type=int,
              help="Tokens the draft's head covers (EAGLE-3's reduced vocabulary: the ones the target generated "
                   "most); 0: the target's whole vocabulary.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the target's weights (match run-engine's).")
@click.option("--device", default="auto", show_default=True, type=click.Choice(("auto", "cpu", "cuda")))
@format_option
@click.pass_context
def command(ctx, preset, checkpoint, out_path, steps, sequences, prompt_len, gen_len, batch, unroll, labels, lr,
            draft_vocab, seed, device, fmt):
    """Generate sequences with the target (seeded weights of --preset, or --checkpoint), record its
    features and next-token distributions, and train the draft with unrolled steps that feed it its
    own outputs (EAGLE-3's training-time test). Reports the loss and the greedy acceptance length
    before and after training, and saves the draft for `run-engine --draft`."""
    import torch
    from ncclprobe.engine.train_draft import TrainSpec
    spec = TrainSpec(sequences=sequences, prompt_len=prompt_len, gen_len=gen_len, steps=steps, batch=min(batch, sequences),
                     lr=lr, unroll=unroll, labels=labels, draft_vocab=draft_vocab, seed=seed)
    out = Path(out_path)
    if out.exists():
        raise UsageProblem(f"{out} already exists; choose another name (drafts are never overwritten)")
    if not out.resolve().parent.is_dir():   # found now, not after minutes of training
        raise UsageProblem(f"cannot write {out}: directory {out.resolve().parent} does not exist")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageProblem("--device cuda was requested but torch sees no CUDA GPU")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    with Progress(steps, "train-draft", quiet=quiet) as progress:
        report = train_and_save(preset, checkpoint, spec, device, out,
                                lambda step, total, loss: step % max(1, total // 20) == 0 and progress.advance(
                                    f"loss {loss:.3f}", steps=max(1, total // 20)))
    doc = {"schema_version": 1, "kind": "draft-training", "preset": None if checkpoint else preset,
           "checkpoint": checkpoint, "out": str(out), **report}
    emit(fmt, doc, [{k: v for k, v in report.items()}], title="ncclprobe train-draft",
         notes=[f"saved {out}", f"acceptance length = tokens per cycle (drafts kept + 1), greedy, k={spec.eval_k}, {spec.eval_prompts} fresh prompts"])
    return 0 if report["acceptance_length_after"] > report["acceptance_length_before"] else 1


def train_and_save(preset_name, checkpoint, spec, device, out, progress) -> dict:
    import torch
    from ncclprobe.engine.build import build_draft, build_target
    from ncclprobe.engine.config import preset
    from ncclprobe.engine.draft import save_draft
    from ncclprobe.engine.train_draft import train
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(spec.seed)
    if checkpoint:
        from ncclprobe.engine.hf_loader import load_checkpoint
        target = load_checkpoint(checkpoint, device=device, dtype=dtype)
    else:
        target = build_target(preset(preset_name), seed=spec.seed, device=device, dtype=dtype)
    draft = build_draft(target, seed=spec.seed, vocab=spec.draft_vocab or None)
    report = train(target, draft, spec, progress=progress)
    save_draft(draft, out, {"training": report})
    return report
