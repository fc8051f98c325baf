"""`ncclprobe sweep`: measure a collective over a grid of NCCL settings, show from NCCL's log
which it read and chose."""

from __future__ import annotations

import sys

import click

from ncclprobe import interrupts
from ncclprobe.cli import exit_codes
from ncclprobe.cli.hosts import HELP as HOSTS_HELP
from ncclprobe.cli.hosts import hosts_options, sweep_across
from ncclprobe.cli.hosts import take as take_hosts
from ncclprobe.cli.options import (
    build_request,
    field_option,
    given_on_command_line,
    request_options,
)
from ncclprobe.cli.output import Progress, emit, force_option, format_option
from ncclprobe.cli.types import Duration, StrictInt
from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.p2p import P2P_LEVELS
from ncclprobe.nccl.recipes import DEFAULT_GRID, PROOF_VARIABLES
from ncclprobe.sizes import format_size, parse_sizes
from ncclprobe.sweep import defaults
from ncclprobe.sweep.build import SweepRequest, parse_settings, split_list
from ncclprobe.sweep.defaults import CHOICES
from ncclprobe.sweep.plan import BUFFERS, PATHS, PLACEMENTS

_PROTO, _ALGO = ",".join(DEFAULT_GRID["NCCL_PROTO"]), ",".join(DEFAULT_GRID["NCCL_ALGO"])
_CONFIGS = len(DEFAULT_GRID["NCCL_PROTO"]) * len(DEFAULT_GRID["NCCL_ALGO"])


def _sizes(text: str | None) -> tuple[int, ...] | None:
    return tuple(parse_sizes(text)) if text is not None else None


def _optional_list(text: str | None) -> tuple[str, ...] | None:
    return split_list(text) if text is not None else None


# The options that describe the measurement, one per field of `SweepRequest` (the ones --resume and
# --collect refuse); defaults are the request's own, or CHOICES' in their command-line form.
SPEC_OPTIONS = (
    field_option(
        "sizes",
        convert=_sizes,
        help="Message sizes in bytes: 8..1G (doubling) or 4K,64K,1M.  [default: see below]",
    ),
    field_option(
        "collectives",
        "--collective",
        convert=split_list,
        default=",".join(CHOICES.collectives),
        show_default=True,
        help="Collectives to measure, comma separated, or `all` (see below).",
    ),
    field_option(
        "dtypes",
        "--dtype",
        convert=split_list,
        default=",".join(CHOICES.dtypes),
        show_default=True,
        help="Element types, comma separated.",
    ),
    field_option(
        "ops",
        "--op",
        convert=split_list,
        default=",".join(CHOICES.ops),
        show_default=True,
        help="Reduction ops of reducing collectives: sum,prod,max,min,avg.",
    ),
    field_option(
        "placement",
        type=click.Choice(list(PLACEMENTS)),
        show_default=True,
        help="In-place, out-of-place or both.",
    ),
    field_option(
        "modes",
        "--mode",
        convert=_optional_list,
        help="eager, graph or eager,graph (graph: CUDA graphs, GPU only).",
    ),
    field_option(
        "warmup", type=StrictInt(min=0, max=1_000_000), help="Untimed iterations per size."
    ),
    field_option(
        "iters",
        type=StrictInt(min=1, max=1_000_000),
        help="Iterations per timed trial (a graph captures them all).",
    ),
    field_option(
        "trials",
        type=StrictInt(min=1, max=10_000),
        help="Timed trials per size (median, p10/p90 over them).",
    ),
    field_option(
        "agg",
        "-m",
        "--agg",
        type=click.IntRange(1),
        show_default=True,
        help="Collectives per iteration, launched as one NCCL group (nccl-tests -m).",
    ),
    field_option(
        "check",
        convert=bool,
        type=click.IntRange(0, 1),
        default=int(CHOICES.check),
        show_default=True,
        help="1: exact correctness pass per measurement; 0: skip it (nccl-tests -c 0).",
    ),
    field_option(
        "buffers",
        type=click.Choice(list(BUFFERS)),
        show_default=True,
        help="rotate: each call uses the next slice of a largest-message buffer (nccl-tests); "
        "reuse: one L2-hot buffer.",
    ),
    field_option(
        "path",
        type=click.Choice(list(PATHS)),
        show_default=True,
        help="torch: torch.distributed (what engines run); nccl: NCCL's own calls through ctypes "
        "(the libnccl torch ships), as nccl-tests makes them.",
    ),
    field_option(
        "iter_events",
        "--iter-events/--no-iter-events",
        show_default=True,
        help="A CUDA event per eager iteration for per-iteration statistics (adds one event "
        "record per call).",
    ),
    field_option(
        "cost_split",
        "--cost-split/--no-cost-split",
        show_default=True,
        help="Also time each eager NCCL row through the other path and event setting: what part "
        "is NCCL's own and what the path adds (cost_split in the JSON, a note per collective).",
    ),
    field_option(
        "protocols",
        "--proto",
        convert=_optional_list,
        show_default=_PROTO,
        help="NCCL_PROTO values.",
    ),
    field_option(
        "algorithms", "--algo", convert=_optional_list, show_default=_ALGO, help="NCCL_ALGO values."
    ),
    field_option(
        "p2p_levels",
        "--p2p-level",
        convert=split_list,
        default=",".join(CHOICES.p2p_levels),
        show_default=True,
        help=f"NCCL_P2P_LEVEL values ({' '.join(P2P_LEVELS)}, exact case).",
    ),
    field_option(
        "settings",
        "--set",
        convert=parse_settings,
        multiple=True,
        metavar="NCCL_VAR=v1,v2",
        help="Any other NCCL variable to sweep (repeatable); `default` leaves it unset. "
        f"{', '.join(PROOF_VARIABLES)} are the sweep's own (its proof).",
    ),
    field_option(
        "nranks",
        type=StrictInt(min=1, max=65536),
        help="Ranks: one per GPU by default, 2 on CPU.",
    ),
    field_option(
        "share_gpu",
        type=StrictInt(min=0, max=64),
        metavar="N",
        help="Diagnostic: N ranks share GPU 0 over NET/Socket (distinct NCCL_HOSTID each), so one "
        "GPU can show NCCL_PROTO/NCCL_ALGO taking effect; times do not reflect NVLink/PCIe.",
    ),
    field_option("backend", type=click.Choice(["auto", "nccl", "gloo"]), show_default=True),
    field_option(
        "timeout_s",
        "--timeout",
        type=Duration(),
        show_default=True,
        help="Seconds a pool may stay silent (starting included) before it counts as hung and is "
        "killed.",
    ),
)


def _effort(effort: defaults.Effort) -> str:
    sizes = parse_sizes(effort.sizes) if effort.sizes else []
    listed = f" ({', '.join(format_size(s) for s in sizes)})" if len(sizes) <= 6 else ""
    return (
        f"sizes {effort.sizes}{listed}, warm-up {effort.warmup}, {effort.iters} iterations x "
        f"{effort.trials} trials, {' and '.join(effort.modes)}"
    )


EPILOG = f"""Defaults: on CPU (gloo, 2 local ranks) {_effort(defaults.CPU)} (graph mode is
skipped there, with the reason in the notes: CUDA graphs need a GPU); on GPUs (NCCL, one rank per
GPU) {_effort(defaults.GPU)}; with --share-gpu N {_effort(defaults.SHARED_GPU)}. Sizes are
nccl-tests' size column: the larger of one rank's send and receive buffers (all_gather: the gathered
output; reduce_scatter and alltoall: the whole input), so busbw compares with nccl-tests'.

Collectives (--collective, comma list or `all`): all_reduce all_gather reduce_scatter broadcast
reduce alltoall sendrecv. gloo runs all seven (no float8 types there); alltoall and sendrecv are out
of place only. --op sum,prod,max,min,avg applies to all_reduce, reduce_scatter and reduce; --dtype
float32,bfloat16,float16,float64,int8,int32,int64,float8_e4m3fn,float8_e5m2 (float8: non-reducing
collectives on NCCL only). --min-busbw GBPS[@SIZE] and --max-latency US[@SIZE] exit 1 naming every
measurement that falls short (default sizes: the largest measured for busbw, the smallest for
latency). Grid default: --proto {_PROTO} --algo {_ALGO} ({_CONFIGS} configurations); with one GPU
only the all-default configuration (NCCL picks no protocol or algorithm for one rank).

\b
--share-gpu N is a diagnostic mode for a machine with one GPU: N ranks on GPU 0, each with its
own NCCL_HOSTID, so NCCL treats them as separate hosts, connects them over NET/Socket and runs
its tuning model. The times say nothing about NVLink/PCIe performance; which settings NCCL read,
which protocol/algorithm it chose per call, and the correctness checks are real.
P2P and SHM settings (--p2p-level, NCCL_P2P_DISABLE, NCCL_SHM_DISABLE) cannot act there: refused.

\b
Examples:
  ncclprobe sweep                                   # the default grid, results under ./runs/
  ncclprobe sweep --sizes 4K,64K,1M --proto LL,Simple --algo default
  ncclprobe sweep --p2p-level default,PHB,SYS --set NCCL_BUFFSIZE=default,8388608
  ncclprobe sweep --output sweep.jsonl --format json
  ncclprobe sweep --share-gpu 2 --proto default,LL,Simple --algo default,Ring   # one GPU
  ncclprobe sweep --resume sweep.jsonl              # continue a killed sweep
  ncclprobe sweep --backend nccl --nranks 16 --torchrun-dir /shared/sw   # two nodes x 8 GPUs:
  ncclprobe sweep --collect /shared/sw              #   after the printed torchrun lines ran
  ncclprobe sweep --launcher srun --nodes 2 --backend nccl --shared-dir /shared/sw   # in salloc

{HOSTS_HELP}

{
    exit_codes(
        "every configuration ran and was confirmed by NCCL",
        "a configuration was wrong, hung, crashed or not confirmed by NCCL, or a --min-busbw/--max-latency "
        "threshold was missed",
        interrupted="the configurations finished so far stay in the results file, "
        "and the last line says `--resume FILE` to continue",
    )
}
"""


@click.command(
    "sweep", epilog=EPILOG, short_help="Measure a collective over a grid of NCCL settings."
)
@request_options(SweepRequest, SPEC_OPTIONS)
@click.option(
    "--min-busbw",
    "min_busbw",
    metavar="GBPS[@SIZE]",
    help="Exit 1 when any measurement's busbw at SIZE is below GBPS.",
)
@click.option(
    "--max-latency",
    "max_latency",
    metavar="US[@SIZE]",
    help="Exit 1 when any measurement's time at SIZE is above US microseconds.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    help="Results file (JSON Lines); default ./runs/sweep-<time>.jsonl. An existing file only with --force.",
)
@click.option(
    "--resume",
    type=click.Path(dir_okay=False),
    help="Continue the sweep recorded in this results file.",
)
@click.option(
    "--torchrun-dir",
    type=click.Path(file_okay=False),
    help="Plan a multi-node sweep: write payloads here, print one torchrun command per pool.",
)
@click.option(
    "--collect",
    type=click.Path(file_okay=False, exists=True),
    help="Turn a --torchrun-dir whose commands have run into a results file.",
)
@hosts_options
@force_option
@format_option
@click.pass_context
def command(
    ctx, resume, output, torchrun_dir, collect, force, fmt, min_busbw, max_latency, **options
):
    """Measure collectives (all-reduce unless --collective says otherwise) over every combination
    of the NCCL settings given, one worker pool per combination of once-per-process settings, and
    prove from NCCL's own debug log that each setting was read. Results are appended to a JSON
    Lines file as each configuration finishes; a table per collective and size (median, per-iteration
    p50/p99, host issue time, busbw, speedup against all-default) goes to stdout.

    Exits 1 when a configuration is wrong, hung, crashed or unconfirmed, or a threshold is missed.
    """
    from ncclprobe.sweep import session

    quiet = (ctx.obj or {}).get("quiet", False)
    explicit = [option.flag for option in given_on_command_line(ctx, SPEC_OPTIONS)]
    across = take_hosts(options)  # --launcher: every node of a job, from this one command
    _refuse_contradictions(resume, collect, torchrun_dir, output, force, explicit)
    if across:
        if resume or collect or torchrun_dir:
            raise UsageProblem(
                "--launcher runs a new sweep; drop --resume, --collect and --torchrun-dir"
            )
        return sweep_across(
            across,
            request(options),
            output=output,
            force=force,
            criteria=(min_busbw, max_latency),
            quiet=quiet,
            render=lambda outcome: _render(fmt, outcome),
        )
    if torchrun_dir:
        return _plan_torchrun(
            torchrun_dir, request(options), bool(output or force), (min_busbw, max_latency)
        )

    def started(job) -> None:
        if not quiet:
            click.echo(f"ncclprobe: results go to {job.path}", err=True)
        if not collect:
            interrupts.set_hint(lambda: session.resume_hint(job.path))

    outcome = session.run(
        session.SessionRequest(
            sweep=None if (resume or collect) else request(options),
            resume=resume,
            collect=collect,
            output=output,
            force=force,
            argv=tuple(sys.argv),
            min_busbw=min_busbw,
            max_latency=max_latency,
        ),
        progress=lambda total, label: Progress(total, label, quiet=quiet),
        started=started,
    )
    interrupts.set_hint(None)
    if not quiet:
        click.echo(f"ncclprobe: results written to {outcome.path}", err=True)
    _render(fmt, outcome)
    return outcome.verdict


def request(values: dict) -> SweepRequest:
    """The command line's options as the library's typed request (`ncclprobe.sweep.build`)."""
    return build_request(SweepRequest, SPEC_OPTIONS, values)


def _refuse_contradictions(
    resume, collect, torchrun_dir, output, force, explicit: list[str]
) -> None:
    """--resume, --collect and --torchrun-dir are three different jobs; each refuses what the others
    take, rather than ignoring it."""
    modes = [
        name
        for name, value in (
            ("--resume", resume),
            ("--collect", collect),
            ("--torchrun-dir", torchrun_dir),
        )
        if value
    ]
    if len(modes) > 1:
        raise UsageProblem(
            f"{modes[0]} and {modes[1]} cannot be combined: each is a job of its own"
        )
    if resume and (explicit or output or force):
        given = explicit[0] if explicit else ("--output" if output else "--force")
        raise UsageProblem(
            f"--resume continues the sweep recorded in {resume!r} with its own settings and file; "
            f"drop {given}"
        )
    if collect and explicit:
        raise UsageProblem(
            f"--collect reads the settings the plan in {collect!r} recorded; drop {explicit[0]}"
        )


def _plan_torchrun(directory: str, asked, output_given: bool, criteria: tuple) -> None:
    from ncclprobe.sweep import session

    lines, nranks = session.plan(
        asked, directory, sys.argv, output_given=output_given, criteria=criteria
    )
    for line in lines:
        click.echo(line)
    click.echo(
        f"ncclprobe: run each command on every node (NNODES x NPROC = {nranks}), pool after pool, "
        f"then: ncclprobe sweep --collect {directory}",
        err=True,
    )


def _render(fmt: str, outcome) -> None:
    report = outcome.report
    if fmt != "table":
        emit(fmt, report.document, report.csv_rows())
        return
    emit(fmt, report.document, [], title=f"sweep: {outcome.results.path}", notes=report.notes)
    for (collective, size), rows in report.tables().items():
        emit(fmt, report.document, rows, title=f"{collective} {rows[0]['size']} ({size} bytes)")
