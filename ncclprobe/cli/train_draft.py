"""`ncclprobe train-draft`: train an EAGLE-3 draft for a preset by self-distillation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.options import PRESET_NAMES, checkpoint_option, device_option, preset_option
from ncclprobe.cli.output import Progress, emit, force_option, format_option, output_option
from ncclprobe.cli.types import StrictFloat
from ncclprobe.errors import UsageProblem
from ncclprobe.safe_output import check_output

EPILOG = f"""\b
Examples:
  ncclprobe train-draft --preset tiny --output tiny-draft.safetensors
  ncclprobe train-draft --preset small --steps 2000 --sequences 512 --output small-draft.st
  ncclprobe run-engine --preset tiny --draft tiny-draft.safetensors
  ncclprobe train-draft --checkpoint smollm2-135m --chat --draft-vocab 4096 \\
      --gen-len 96 --output smol-draft.safetensors

{exit_codes("trained and saved", "the draft's acceptance length did not rise")}"""


@click.command(epilog=EPILOG, short_help="Train an EAGLE-3 draft head on the target's own outputs.")
@preset_option("Target model shape.", PRESET_NAMES)
@checkpoint_option()
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(dir_okay=False),
    help="Training prompts (as run-engine's --prompts). Default with a tokenizer: the shipped prompt set's "
    "64 train prompts; without one: random tokens.",
)
@click.option(
    "--eval-prompts",
    "eval_file",
    type=click.Path(dir_okay=False),
    help="Prompts for the acceptance before/after. Default with a tokenizer: the shipped 16 held-out prompts.",
)
@click.option(
    "--chat",
    is_flag=True,
    help="Wrap text prompts in the checkpoint's chat template (train as run-engine --chat serves).",
)
@click.option(
    "--data-temperature",
    default=0.7,
    show_default=True,
    type=float,
    help="Each prompt's first continuation is greedy; its further ones (--sequences beyond the prompts) are "
    "sampled at this temperature.",
)
@output_option(
    "Draft file to write (.safetensors), checked before training; an existing file only with --force.",
    dest="out_path",
    required=True,
    old=("--out",),
)
@click.option("--steps", default=1000, show_default=True, type=int, help="Optimiser steps.")
@click.option(
    "--sequences",
    default=512,
    show_default=True,
    type=int,
    help="Training sequences the target generates.",
)
@click.option(
    "--prompt-len",
    default=8,
    show_default=True,
    type=int,
    help="Random prompt tokens per sequence (no tokenizer).",
)
@click.option(
    "--gen-len",
    default=56,
    show_default=True,
    type=int,
    help="Tokens the target generates per sequence; prompt + these are the positions the draft "
    "learns, so cover the runs it will serve (run-engine warns when a run goes beyond).",
)
@click.option(
    "--batch", default=16, show_default=True, type=int, help="Sequences per optimiser step."
)
@click.option("--unroll", default=3, show_default=True, type=int, help="Training-time-test depth.")
@click.option(
    "--labels",
    default="mixed",
    show_default=True,
    type=click.Choice(("soft", "hard", "mixed")),
    help="Train against the target's distribution, its greedy choice, or the mean of both losses.",
)
@click.option(
    "--lr",
    default=3e-3,
    show_default=True,
    type=StrictFloat(min=0, max=10, min_open=True),
    help="AdamW learning rate.",
)
@click.option(
    "--draft-vocab",
    default=0,
    show_default=True,
    type=int,
    help="Tokens the draft's head covers (EAGLE-3's reduced vocabulary: the ones the target generated "
    "most); 0: the target's whole vocabulary.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of the target's weights (match run-engine's).",
)
@device_option
@force_option
@format_option
@click.pass_context
def command(
    ctx,
    preset,
    checkpoint,
    prompts_file,
    eval_file,
    chat,
    data_temperature,
    out_path,
    steps,
    sequences,
    prompt_len,
    gen_len,
    batch,
    unroll,
    labels,
    lr,
    draft_vocab,
    seed,
    device,
    force,
    fmt,
):
    """Generate sequences with the target (seeded weights of --preset, or --checkpoint), record its
    features and next-token distributions, and train the draft with unrolled steps that feed it its
    own outputs (EAGLE-3's training-time test). Reports the loss and the greedy acceptance length
    before and after training, and saves the draft for `run-engine --draft`. With a checkpoint
    that has a tokenizer (a .gguf file has one) the data is the model's own text from real prompts."""
    from ncclprobe.cli.options import prepare_checkpoint
    from ncclprobe.engine import train_job
    from ncclprobe.engine.checkpoints import resolve_name
    from ncclprobe.engine.train_spec import TrainSpec

    # Usage errors first, before torch is imported (engine.train_draft imports it): one line at once.
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    spec = TrainSpec(
        sequences=sequences,
        prompt_len=prompt_len,
        gen_len=gen_len,
        steps=steps,
        batch=min(batch, sequences),
        lr=lr,
        unroll=unroll,
        labels=labels,
        draft_vocab=draft_vocab,
        seed=seed,
        data_temperature=data_temperature,
    )
    checkpoint = resolve_name(checkpoint)
    out = check_output(
        out_path,
        force=force,
        what="--output",  # found now, not after minutes of training
        inputs=[p for p in (checkpoint, prompts_file, eval_file) if p],
    )
    for path, what in (
        (checkpoint, "checkpoint"),
        (prompts_file, "--prompts"),
        (eval_file, "--eval-prompts"),
    ):
        if path and not Path(path).exists():
            raise UsageProblem(f"{what} {path} does not exist")
    device = train_job.resolve_device(device)
    prepare_checkpoint(checkpoint, quiet)  # every option is valid: now a .gguf may be converted
    prompts, eval_prompts, prompt_source = train_job.training_prompts(
        checkpoint, prompts_file, eval_file, chat
    )
    spec = dataclasses.replace(spec, prompts=prompts, eval_prompt_ids=eval_prompts)
    train_job.check_training_limits(preset, checkpoint, spec)
    stages = _Stages(quiet)
    try:
        report = train_job.train_and_save(
            spec,
            out,
            preset_name=preset,
            checkpoint=checkpoint,
            device=device,
            replace=force,
            progress=stages.step,
            data_progress=stages.data,
        )
    finally:
        stages.close()
    doc = {
        "schema_version": 1,
        "kind": "draft-training",
        "preset": None if checkpoint else preset,
        "checkpoint": checkpoint,
        "out": str(out),
        "prompt_source": prompt_source,
        "chat": chat,
        **report,
    }
    emit(
        fmt,
        doc,
        [{k: v for k, v in report.items()}],
        title="ncclprobe train-draft",
        notes=[
            f"saved {out}",
            f"prompts: {prompt_source}",
            f"acceptance length = tokens per cycle (drafts kept + 1), greedy, k={spec.eval_k}, "
            f"{report['eval_prompts']} prompts the draft was not trained on",
        ],
    )
    return train_job.verdict(report)


class _Stages:
    """train-draft's progress on stderr: the target generating the data, then the training steps,
    each with its own clock. One clock over both gave a first ETA of 7499 s on the CPU machine: the
    steps' rate counted the minutes of generation before them, and nothing was shown meanwhile."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.bars: dict[str, Progress] = {}

    def _bar(self, label: str, total: int, done: int) -> tuple[Progress, bool]:
        """The stage's bar, and whether it was started just now (its clock starts at `done`)."""
        if label in self.bars:
            return self.bars[label], False
        for bar in self.bars.values():
            bar.__exit__(None, None, None)
        self.bars[label] = Progress(total, label, quiet=self.quiet, done=done)
        return self.bars[label], True

    def data(self, done: int, total: int) -> None:
        """Called with 0 when generation starts, then after each chunk of sequences."""
        bar, new = self._bar("train-draft data", total, done)
        if not new:
            bar.advance(f"{done}/{total} sequences generated", steps=done - bar.done)

    def step(self, step: int, total: int, loss: float) -> None:
        """Called after every step; the clock starts at the first one's end (the steps before the
        first callback are not timed by it)."""
        bar, new = self._bar("train-draft", total, step)
        every = max(1, total // 20)
        if not new and (step % every == 0 or step == total):
            bar.advance(f"loss {loss:.3f}", steps=step - bar.done)

    def close(self) -> None:
        for bar in list(self.bars.values())[-1:]:
            bar.__exit__(None, None, None)
