"""`ncclprobe run-engine`: the speculative engine, baseline against speculative, side by side."""

from __future__ import annotations

import dataclasses

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.options import (
    DEVICE,
    PRESET_NAMES,
    build_request,
    checkpoint_kwargs,
    field_option,
    parse_batch_list,
    parse_env_pairs,
    prepare_checkpoint,
    preset_kwargs,
    request_options,
)
from ncclprobe.cli.output import Progress, emit, force_option, format_option
from ncclprobe.cli.types import StrictFloat
from ncclprobe.engine.spec import MODES, RunSpec
from ncclprobe.evidence.run.modes import GraphMode
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


def _modes(given: tuple[str, ...]) -> tuple[str, ...]:
    return given or MODES


def _late_pairs(pairs) -> dict[str, str]:
    return parse_env_pairs(pairs, "--env-after-init")


def _checkpoint(name: str | None) -> str | None:
    from ncclprobe.engine.checkpoints import resolve_name

    return resolve_name(name)


class TuningSource(click.ParamType):
    """--tuned's value: a recommendation file read into a `Tuning`; bare, the quick sweep first."""

    name = "file"

    def convert(self, value, param, ctx):
        from ncclprobe.engine_session import Tuning

        return value if isinstance(value, Tuning) else Tuning.from_file(value)


def _sweep_first():
    from ncclprobe.engine_session import Tuning

    return Tuning.sweep_first()


# The options of the run, one per field of `RunSpec` (its defaults are the spec's own)
SPEC_OPTIONS = (
    field_option("preset", **preset_kwargs("Model shape.", PRESET_NAMES)),
    field_option(
        "checkpoint",
        convert=_checkpoint,
        **checkpoint_kwargs(
            "A .gguf file is dequantized to float32 once and cached (needs ncclprobe[gguf])."
        ),
    ),
    field_option(
        "prompt_len",
        show_default=True,
        type=int,
        help="Tokens per random prompt (when no prompt is given).",
    ),
    field_option(
        "chat",
        is_flag=True,
        help="Wrap each text prompt in the checkpoint's chat template (instruct models).",
    ),
    field_option("new_tokens", show_default=True, type=int, help="Tokens generated per sequence."),
    field_option("batch", show_default=True, type=int, help="Sequences decoded together."),
    field_option("k", "-k", "--k", show_default=True, type=int, help="Drafted tokens per cycle."),
    field_option(
        "temperature", show_default=True, type=StrictFloat(min=0, max=100), help="0 is greedy."
    ),
    field_option(
        "seed", show_default=True, type=int, help="Seed of weights, prompts and sampling."
    ),
    field_option(
        "tp", show_default=True, type=int, help="Tensor-parallel ranks (one process each)."
    ),
    field_option(
        "draft",
        type=click.Path(dir_okay=False),
        help="Trained draft from train-draft; default untrained.",
    ),
    field_option(
        "draft_tp",
        "--draft-tp/--no-draft-tp",
        show_default=True,
        help="Shard the draft like the target (each draft step all-reduces) instead of "
        "replicating it.",
    ),
    field_option(
        "graphs",
        default=GraphMode.NONE.value,
        show_default=True,
        type=click.Choice(GraphMode.values()),
        help="CUDA graphs: none, the baseline decode only, or every step, prefill included "
        "(GPU only).",
    ),
    field_option(
        "capture_batches",
        convert=parse_batch_list,
        default=None,
        metavar="B1,B2,...",
        help="Batch sizes to capture graphs for (default: --batch only); a --batch outside the "
        "list runs eagerly.",
    ),
    field_option(
        "compile",
        convert=lambda mode: mode or "",
        is_flag=False,
        flag_value="default",
        default=None,
        metavar="[MODE]",
        type=click.Choice(("default", "max-autotune")),
        help="torch.compile each captured step before capturing it (fuses the small kernels "
        "around the GEMMs; max-autotune also tries Triton GEMMs; needs --graphs decode or all; "
        "compiling takes a while).",
    ),
    field_option(
        "single_rank_collectives",
        is_flag=True,
        help="With --tp 1, issue the all-reduces anyway (one-rank NCCL: real calls, nothing "
        "moved) to trace and time them on one GPU.",
    ),
    field_option("device", **DEVICE),
    field_option(
        "dtype",
        show_default=True,
        type=click.Choice(("auto", "float32", "bfloat16", "float16")),
        help="auto: bfloat16 on GPU, float32 on CPU.",
    ),
    field_option(
        "modes",
        "--mode",
        convert=_modes,
        default=(),
        multiple=True,
        type=click.Choice(MODES),
        help="Run only these modes (repeatable); default both.",
    ),
    field_option(
        "settings",
        "--env",
        convert=parse_env_pairs,
        multiple=True,
        metavar="K=V",
        help="Setting for every worker's environment (repeatable).",
    ),
    field_option(
        "env_after_init",
        "--env-after-init",
        convert=_late_pairs,
        multiple=True,
        metavar="K=V",
        help="Reproduce a classic mistake on purpose: each worker sets K=V in its own environment "
        "only after its communicator exists, when NCCL has already read it (repeatable).",
    ),
    field_option(
        "profile_dir",
        "--profile",
        type=click.Path(file_okay=False),
        help="Write a torch.profiler trace of each rank's measured loop into this directory "
        "(LABEL-MODE-rankN.trace.json.gz; read by `diagnose --profile`).",
    ),
)


@click.command(
    epilog=EPILOG, short_help="Run the TP speculative-decoding engine: baseline vs speculative."
)
@request_options(RunSpec, SPEC_OPTIONS)
@click.option(
    "--prompt",
    "prompt_texts",
    multiple=True,
    metavar="TEXT",
    help="A text prompt, encoded by the checkpoint's tokenizer (repeatable); --batch of them "
    "decode together.",
)
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(dir_okay=False),
    help='Prompts file: one text prompt per line, or .jsonl lines of {"text": ...} or '
    '{"ids": [...]}.',
)
@click.option(
    "--prompt-set",
    type=click.Choice(("train", "heldout")),
    help="The shipped prompt set's split (80 prompts, docs: engine/prompts.py); heldout: what no "
    "draft trained on.",
)
@click.option(
    "--tuned",
    "tuning",
    is_flag=False,
    flag_value=_sweep_first(),
    default=None,
    type=TuningSource(),
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
@force_option
@format_option
@click.pass_context
def command(
    ctx,
    prompt_texts,
    prompts_file,
    prompt_set,
    tuning,
    allow_ll128,
    trace_path,
    repeats,
    force,
    fmt,
    **options,
):
    """Run the engine's baseline (target only) and speculative modes on the same prompts, on --tp
    worker processes (gloo on CPU, NCCL on GPUs), and report tokens/s, phase times, acceptance and
    the collectives issued per token. With --temperature 0 the speculative output must equal the
    baseline token for token; the command checks that (and that all ranks agree) and exits 1 if not."""
    from ncclprobe import engine_session
    from ncclprobe.evidence.run.profile_dir import next_command
    from ncclprobe.evidence.run.trace_checks import verdict

    # Usage errors first, before torch is imported or a .gguf converted: one line within a second.
    spec = _spec(options, repeats)
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    _check_outputs(spec, tuning, prompts_file, trace_path, force)
    spec.check_device()
    prepare_checkpoint(
        spec.checkpoint, quiet
    )  # every option is valid: now a .gguf may be converted
    spec = _with_prompts(spec, prompt_texts, prompts_file, prompt_set)
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
            f"ncclprobe: profiles written to {spec.profile_dir}; next: "
            f"{next_command(doc['profiles'], spec.profile_dir)}",
            err=True,
        )
    emit(fmt, doc, table_rows(doc), title="ncclprobe run-engine", notes=all_notes(doc))
    return verdict(doc)


def _spec(options: dict, repeats: int | None) -> RunSpec:
    """The run as the options ask it, validated; --repeats' default is where the run goes."""
    from ncclprobe.engine.spec import default_repeats

    spec = build_request(RunSpec, SPEC_OPTIONS, options)
    return dataclasses.replace(
        spec, repeats=repeats or default_repeats(spec.device, spec.checkpoint)
    )


def _check_outputs(spec: RunSpec, tuning, prompts_file, trace_path, force) -> None:
    """Before any work: the trace is written whole at the end (a failed or interrupted run leaves
    none), and never over an input; the profile directory must be new."""
    if trace_path:
        inputs = [spec.draft, prompts_file, spec.checkpoint, tuning.source if tuning else None]
        check_output(trace_path, force=force, what="trace file", inputs=[p for p in inputs if p])
    if spec.profile_dir:
        check_output_dir(spec.profile_dir, what="--profile", has_force=False)


def _with_prompts(spec: RunSpec, texts, prompts_file, prompt_set) -> RunSpec:
    """The spec with its prompts' token ids, and the options that gave them (for next commands)."""
    from ncclprobe.engine.prompts import gather_prompts

    prompts = gather_prompts(
        spec.checkpoint, texts=texts, file=prompts_file, prompt_set=prompt_set, chat=spec.chat
    )
    given = [("--prompt", t) for t in texts] + [
        (flag, value)
        for flag, value in (("--prompts", prompts_file), ("--prompt-set", prompt_set))
        if value
    ]
    options = (["--chat"] if spec.chat else []) + [word for pair in given for word in pair]
    return dataclasses.replace(spec, prompts=prompts, prompt_options=tuple(options))
