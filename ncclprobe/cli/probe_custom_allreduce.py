"""`ncclprobe probe custom-allreduce`: IPC one-shot/two-shot and symmetric-memory all-reduce
against NCCL at decode sizes, eager and in CUDA graphs (GPU only)."""

from __future__ import annotations

import contextlib

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import Progress, emit, format_option
from ncclprobe.errors import UsageProblem

EPILOG = f"""\b
Examples:
  ncclprobe probe custom-allreduce
  ncclprobe probe custom-allreduce --sizes 4K,64K,1M --dtype bfloat16,float32 --format json
  ncclprobe probe custom-allreduce --methods nccl,ipc-oneshot --mode graph --nranks 2
  ncclprobe probe custom-allreduce --share-gpu 2 --iters 10 --trials 3 --graph-ops 5 --replays 2

\b
Methods:
  nccl          torch.distributed.all_reduce (in place)
  ipc-oneshot   our Triton kernel: every rank reads every rank's CUDA IPC buffer and sums
  ipc-twoshot   our Triton kernel: reduce-scatter then all-gather through the IPC buffers
  symm-oneshot  torch.ops.symm_mem.one_shot_all_reduce (torch symmetric memory, no multicast)
  symm-twoshot  torch.ops.symm_mem.two_shot_all_reduce_

--share-gpu N runs N ranks on GPU 0 (a machine with one GPU): the processes time-slice the GPU,
so the times are not link times and no verdict is given, but every method's correctness across
processes is real. Speed needs one GPU per rank.

{
    exit_codes(
        "every measured result exact",
        "a wrong result, a failed method or ranks that ended early",
        "no CUDA GPU with NCCL here (or too few GPUs)",
    )
}"""


@click.command(epilog=EPILOG, short_help="Custom IPC and symmetric-memory all-reduce against NCCL.")
@click.option(
    "--sizes", default="4K..1M", show_default=True, help="Message sizes in bytes (4K..1M doubles)."
)
@click.option(
    "--dtype",
    "dtypes",
    default="bfloat16",
    show_default=True,
    help="Comma list of bfloat16, float32.",
)
@click.option(
    "--methods",
    default="nccl,ipc-oneshot,ipc-twoshot,symm-oneshot,symm-twoshot",
    show_default=True,
    help="Comma list of methods (see below).",
)
@click.option(
    "--mode", "modes", default="eager,graph", show_default=True, help="Comma list of eager, graph."
)
@click.option(
    "--nranks", default=0, type=int, help="Ranks, one GPU each (default: every visible GPU)."
)
@click.option(
    "--share-gpu",
    default=0,
    type=int,
    metavar="N",
    help="DIAGNOSTIC: N ranks on GPU 0; correctness is real, times are not link times.",
)
@click.option("--iters", default=50, show_default=True, type=int, help="Eager calls per trial.")
@click.option(
    "--trials",
    default=5,
    show_default=True,
    type=int,
    help="Timed trials per step (spread: p10/p90).",
)
@click.option(
    "--warmup", default=5, show_default=True, type=int, help="Untimed calls before the trials."
)
@click.option(
    "--graph-ops",
    default=20,
    show_default=True,
    type=int,
    help="All-reduces captured in the timed graph.",
)
@click.option(
    "--replays", default=5, show_default=True, type=int, help="Replays of that graph per trial."
)
@click.option(
    "--checks",
    default=3,
    show_default=True,
    type=int,
    help="Correctness calls per step, each on fresh inputs, compared exactly.",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=300.0,
    show_default=True,
    type=float,
    help="Seconds the ranks may go without progress before they are killed.",
)
@format_option
@click.pass_context
def command(
    ctx,
    sizes,
    dtypes,
    methods,
    modes,
    nranks,
    share_gpu,
    iters,
    trials,
    warmup,
    graph_ops,
    replays,
    checks,
    timeout_s,
    fmt,
):
    """Time NCCL's all-reduce against a one-shot and a two-shot all-reduce over CUDA IPC buffers
    (the kind vLLM and SGLang ship for small messages, here our own Triton kernels) and torch's
    symmetric-memory all-reduce, eager and inside CUDA graphs, with every result checked exactly.
    Says which methods cannot run here and why, and whether vLLM/SGLang would use theirs on this
    topology. Needs CUDA GPUs: on a CPU-only machine it exits 3 and says why."""
    from ncclprobe.probes.custom_allreduce_plan import CustomAllReduceSpec
    from ncclprobe.probes.custom_allreduce_report import table_rows, verdict
    from ncclprobe.probes.custom_allreduce_run import run_custom_allreduce
    from ncclprobe.sizes import parse_sizes

    spec = CustomAllReduceSpec(
        sizes=tuple(parse_sizes(sizes)),
        dtypes=_names(dtypes, "--dtype"),
        methods=_names(methods, "--methods"),
        modes=_names(modes, "--mode"),
        nranks=nranks,
        share_gpu=share_gpu,
        iters=iters,
        trials=trials,
        warmup=warmup,
        graph_ops=graph_ops,
        replays=replays,
        checks=checks,
        timeout_s=timeout_s,
    )
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    with contextlib.ExitStack() as stack:
        bar = []

        def on_step(step: dict, total: int) -> None:
            if not bar:
                bar.append(stack.enter_context(Progress(total, "custom-allreduce", quiet=quiet)))
            bar[0].advance(f"{step['method']} {step['dtype']} {step['size_bytes']}B {step['mode']}")

        doc = run_custom_allreduce(spec, on_step=on_step)
    rows = table_rows(doc) if fmt == "table" else doc["rows"]
    emit(
        fmt,
        doc,
        rows,
        title="custom-allreduce: us per all-reduce (slowest rank, median of trials)",
        notes=doc["notes"],
    )
    return verdict(doc)


def _names(text: str, option: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(","))
    if not all(names):
        raise UsageProblem(f"{option} {text!r}: empty name in the comma list")
    return names
