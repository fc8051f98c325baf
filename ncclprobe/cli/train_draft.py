"""`ncclprobe train-draft`: train an EAGLE-3 draft for a preset by self-distillation."""

from __future__ import annotations

import dataclasses

import click

from ncclprobe.cli.output import Progress, emit, force_option, format_option
from ncclprobe.cli.run_engine import PRESET_NAMES
from ncclprobe.cli.types import StrictFloat
from ncclprobe.errors import UsageProblem
from ncclprobe.safe_output import check_output

EPILOG = """\b
Examples:
  ncclprobe train-draft --preset tiny --out tiny-draft.safetensors
  ncclprobe train-draft --preset small --steps 2000 --sequences 512 --out small-draft.safetensors
  ncclprobe run-engine --preset tiny --draft tiny-draft.safetensors
  ncclprobe train-draft --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --chat --draft-vocab 4096 --gen-len 96 --out smol-draft.safetensors

Exit codes: 0 trained and saved, 1 acceptance did not rise, 2 bad options, 4 internal error."""


@click.command(epilog=EPILOG, short_help="Train an EAGLE-3 draft head on the target's own outputs.")
@click.option("--preset", default="tiny", show_default=True, type=click.Choice(PRESET_NAMES), help="Target model shape.")
@click.option("--checkpoint", type=click.Path(), help="Local Hugging Face Llama directory or .gguf file (overrides --preset).")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
              help="Training prompts (as run-engine's --prompts). Default with a tokenizer: the shipped prompt set's "
                   "64 train prompts; without one: random tokens.")
@click.option("--eval-prompts", "eval_file", type=click.Path(dir_okay=False),
              help="Prompts for the acceptance before/after. Default with a tokenizer: the shipped 16 held-out prompts.")
@click.option("--chat", is_flag=True, help="Wrap text prompts in the checkpoint's chat template (train as run-engine --chat serves).")
@click.option("--data-temperature", default=0.7, show_default=True, type=float,
              help="Each prompt's first continuation is greedy; its further ones (--sequences beyond the prompts) are "
                   "sampled at this temperature.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="Draft file to write (.safetensors), checked before training; an existing file only with --force.")
@click.option("--steps", default=1000, show_default=True, type=int, help="Optimiser steps.")
@click.option("--sequences", default=512, show_default=True, type=int, help="Training sequences the target generates.")
@click.option("--prompt-len", default=8, show_default=True, type=int, help="Random prompt tokens per sequence (no tokenizer).")
@click.option("--gen-len", default=56, show_default=True, type=int, help="Tokens the target generates per sequence; prompt + these are the positions the draft "
                   "learns, so cover the runs it will serve (run-engine warns when a run goes beyond).")
@click.option("--batch", default=16, show_default=True, type=int, help="Sequences per optimiser step.")
@click.option("--unroll", default=3, show_default=True, type=int, help="Training-time-test depth.")
@click.option("--labels", default="mixed", show_default=True, type=click.Choice(("soft", "hard", "mixed")),
              help="Train against the target's distribution, its greedy choice, or the mean of both losses.")
@click.option("--lr", default=3e-3, show_default=True, type=StrictFloat(min=0, max=10, min_open=True), help="AdamW learning rate.")
@click.option("--draft-vocab", default=0, show_default=True, type=int,
              help="Tokens the draft's head covers (EAGLE-3's reduced vocabulary: the ones the target generated "
                   "most); 0: the target's whole vocabulary.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the target's weights (match run-engine's).")
@click.option("--device", default="auto", show_default=True, type=click.Choice(("auto", "cpu", "cuda")))
@force_option
@format_option
@click.pass_context
def command(ctx, preset, checkpoint, prompts_file, eval_file, chat, data_temperature, out_path, steps, sequences,
            prompt_len, gen_len, batch, unroll, labels, lr, draft_vocab, seed, device, force, fmt):
    """Generate sequences with the target (seeded weights of --preset, or --checkpoint), record its
    features and next-token distributions, and train the draft with unrolled steps that feed it its
    own outputs (EAGLE-3's training-time test). Reports the loss and the greedy acceptance length
    before and after training, and saves the draft for `run-engine --draft`. With a checkpoint
    that has a tokenizer (a .gguf file has one) the data is the model's own text from real prompts."""
    import torch
    from ncclprobe.cli.run_engine import prepare_checkpoint
    from ncclprobe.engine.train_draft import TrainSpec
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    spec = TrainSpec(sequences=sequences, prompt_len=prompt_len, gen_len=gen_len, steps=steps, batch=min(batch, sequences),
                     lr=lr, unroll=unroll, labels=labels, draft_vocab=draft_vocab, seed=seed,
                     data_temperature=data_temperature)
    out = check_output(out_path, force=force, what="--out")   # found now, not after minutes of training
    prepare_checkpoint(checkpoint, quiet)   # every option is valid: now a .gguf may be converted
    prompts, eval_prompts, prompt_source = training_prompts(checkpoint, prompts_file, eval_file, chat)
    spec = dataclasses.replace(spec, prompts=prompts, eval_prompt_ids=eval_prompts)
    check_training_limits(preset, checkpoint, spec)
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageProblem("--device cuda was requested but torch sees no CUDA GPU")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    with Progress(steps, "train-draft", quiet=quiet) as progress:
        report = train_and_save(preset, checkpoint, spec, device, out, force,
                                lambda step, total, loss: step % max(1, total // 20) == 0 and progress.advance(
                                    f"loss {loss:.3f}", steps=max(1, total // 20)))
    doc = {"schema_version": 1, "kind": "draft-training", "preset": None if checkpoint else preset,
           "checkpoint": checkpoint, "out": str(out), "prompt_source": prompt_source, "chat": chat, **report}
    emit(fmt, doc, [{k: v for k, v in report.items()}], title="ncclprobe train-draft",
         notes=[f"saved {out}", f"prompts: {prompt_source}",
                f"acceptance length = tokens per cycle (drafts kept + 1), greedy, k={spec.eval_k}, "
                f"{report['eval_prompts']} prompts the draft was not trained on"])
    return 0 if report["acceptance_length_after"] > report["acceptance_length_before"] else 1


def training_prompts(checkpoint, prompts_file, eval_file, chat):
    """(training prompt ids, held-out prompt ids, a sentence naming their source): the given
    files, else the shipped set when the checkpoint has a tokenizer, else random tokens."""
    from ncclprobe.engine.prompts import SHIPPED, codec_for, encode_prompts, read_prompts_file, shipped_prompts
    codec = codec_for(checkpoint)
    if codec is None and not (prompts_file or eval_file or chat):
        return (), (), "random tokens (the target has no tokenizer)"
    if codec is None:
        codec_for(checkpoint, required=True)   # says why text cannot be used
    train = read_prompts_file(prompts_file) if prompts_file else shipped_prompts("train")
    held = read_prompts_file(eval_file) if eval_file else shipped_prompts("heldout")
    source = (f"{prompts_file}" if prompts_file else f"the shipped set's train split ({len(train)} prompts, {SHIPPED.name}, "
              f"Apache-2.0)") + f"; acceptance on {eval_file or f'its {len(held)} held-out prompts'}"
    return encode_prompts(train, codec, chat), encode_prompts(held, codec, chat), source


def check_training_limits(preset_name, checkpoint, spec) -> None:
    """The positions training touches (prompt + generated + the evaluation's last cycle) against the
    context the target serves; one line before any work."""
    from ncclprobe.engine.spec import RunSpec
    longest = max((len(p) for p in (*spec.prompts, *spec.eval_prompt_ids)), default=spec.prompt_len)
    RunSpec(preset=preset_name, checkpoint=checkpoint, prompt_len=max(2, longest), new_tokens=spec.gen_len,
            k=spec.eval_k, device="cpu" if checkpoint is None else "auto").check_limits()


def train_and_save(preset_name, checkpoint, spec, device, out, force, progress) -> dict:

    import torch
    from ncclprobe.engine.build import build_draft, build_target
    from ncclprobe.engine.config import preset
    from ncclprobe.engine.draft import save_draft
    from ncclprobe.engine.train_draft import train
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(spec.seed)
    from ncclprobe.engine.gguf_loader import resolve_checkpoint
    if checkpoint:
        from ncclprobe.engine.hf_loader import load_checkpoint
        target = load_checkpoint(resolve_checkpoint(checkpoint), device=device, dtype=dtype)
    else:
        target = build_target(preset(preset_name), seed=spec.seed, device=device, dtype=dtype)
    draft = build_draft(target, seed=spec.seed, vocab=spec.draft_vocab or None)
    report = train(target, draft, spec, progress=progress)
    from ncclprobe.engine.target_identity import target_identity
    identity = target_identity(target.cfg.summary(), preset=None if checkpoint else preset_name, seed=spec.seed,
                               checkpoint=str(resolve_checkpoint(checkpoint)) if checkpoint else None)
    save_draft(draft, out, {"training": report, "target": identity}, replace=force)
    return report
