"""`ncclprobe train-target`: a preset-shaped target trained on a synthetic language, saved as a
Hugging Face Llama checkpoint that run-engine and train-draft serve (`ncclprobe.engine.target_job`)."""

from __future__ import annotations

import dataclasses

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.options import PRESET_NAMES, device_option, preset_option
from ncclprobe.cli.output import Progress, emit, force_option, format_option, output_option
from ncclprobe.cli.types import StrictFloat, StrictInt

EPILOG = f"""\b
Examples:
  ncclprobe train-target --preset tiny --output tiny-chain                  # a minute on a CPU
  ncclprobe train-target --preset small --output small-chain --device cuda   # a minute on an H200
  ncclprobe train-target --preset llama-16l --batch 16 --output l16-chain --device cuda
  ncclprobe train-draft --checkpoint small-chain --output chain-draft.safetensors \\
      --gen-len 272 --draft-vocab 8000
  ncclprobe run-engine --checkpoint small-chain --draft chain-draft.safetensors \\
      --graphs all --compile --new-tokens 256

Keep run-engine's --prompt-len + --new-tokens + k within the trained positions (--seq-len, printed as
trained_positions), and give train-draft a --gen-len that covers the run: neither model has seen
positions beyond what it was trained on. Every figure measured with this target is one of a
"target trained on a synthetic corpus".

{exit_codes("trained, saved and checked")}"""

OVERRIDES = ("steps", "batch", "seq_len", "lr", "warmup", "active_vocab", "top_prob", "seed")


@click.command(
    epilog=EPILOG, short_help="Train a target on a synthetic language (a draft can then learn it)."
)
@preset_option("Dense model shape to train.", PRESET_NAMES)
@output_option(
    "Checkpoint directory to write (config.json + model.safetensors); an earlier one only with --force.",
    directory=True,
    required=True,
)
@device_option
@click.option("--steps", type=StrictInt(min=1), help="Optimiser steps  [default: the preset's].")
@click.option("--batch", type=StrictInt(min=1), help="Sequences per step.")
@click.option(
    "--seq-len",
    type=StrictInt(min=8),
    help="Tokens per training sequence: the positions the target knows.",
)
@click.option(
    "--lr", type=StrictFloat(min=0, max=1, min_open=True), help="AdamW peak learning rate."
)
@click.option("--warmup", type=StrictInt(min=0), help="Warm-up steps.")
@click.option("--active-vocab", type=StrictInt(min=2), help="Tokens the chain moves between.")
@click.option(
    "--top-prob",
    type=StrictFloat(min=0, max=1, min_open=True),
    help="Probability of each context's most likely successor.",
)
@click.option("--seed", type=StrictInt(min=0), help="Seed of the weights, the chain and the data.")
@click.option(
    "--check-prompts",
    default=16,
    show_default=True,
    type=StrictInt(min=1),
    help="Random prompts for the greedy check of the saved checkpoint.",
)
@click.option(
    "--check-prompt-len", default=16, show_default=True, type=StrictInt(min=2), help="Their length."
)
@click.option(
    "--check-tokens",
    type=StrictInt(min=1),
    help="Greedy tokens per prompt  [default: up to the trained positions].",
)
@force_option
@format_option
@click.pass_context
def command(
    ctx,
    preset,
    output,
    device,
    check_prompts,
    check_prompt_len,
    check_tokens,
    force,
    fmt,
    **overrides,
):
    """Train a target shaped like --preset, briefly, on a seeded order-2 Markov chain whose sequences
    open with random full-vocabulary tokens (like run-engine's prompts), save it, reload it as
    run-engine does and decode random prompts greedily. Random preset weights make the greedy
    token a hash of the context, which no draft can learn; this target's next token is learnable."""
    from ncclprobe.engine.target_job import LABEL, GreedyCheck, train_and_save_target
    from ncclprobe.engine.train_job import resolve_device
    from ncclprobe.engine.train_target import default_spec
    from ncclprobe.safe_output import check_output_dir

    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    chosen = {
        name: value for name, value in overrides.items() if name in OVERRIDES and value is not None
    }
    spec = dataclasses.replace(default_spec(preset), **chosen)
    check = GreedyCheck(
        prompts=check_prompts, prompt_len=check_prompt_len, tokens=check_tokens
    ).resolved(spec)
    check_output_dir(output, force=force, what="--output")  # before minutes of training
    device = resolve_device(device)
    with Progress(spec.steps, "train-target", quiet=quiet) as progress:
        figures = train_and_save_target(
            preset,
            spec,
            output,
            device=device,
            check=check,
            force=force,
            progress=lambda step, steps, loss: progress.advance(
                f"loss {loss:.3f}", steps=step - progress.done
            ),
        )
    doc = {"schema_version": 1, "kind": "target-training", "label": LABEL, **figures}
    emit(fmt, doc, [{"figure": key, "value": value} for key, value in figures.items()], title=LABEL)
