"""`ncclprobe probe env-propagation`: which ways of setting an NCCL variable reach a worker's NCCL."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit, format_option, output_option
from ncclprobe.cli.types import Duration
from ncclprobe.errors import Unsupported

EPILOG = f"""\b
Examples:
  ncclprobe probe env-propagation
  ncclprobe probe env-propagation --mechanism fork --mechanism forkserver-after-start
  ncclprobe probe env-propagation --nccl --output /tmp/envprop --format json

\b
Columns: /proc (what env-check sees from outside), getenv (C getenv in the worker: what NCCL
calls), os.environ (Python's view), read by NCCL (NCCL's own `set by environment` line; on a GPU).

{exit_codes("every mechanism was measured", "a mechanism failed", "no mechanism could be measured here")}
"""


def _mechanism_names():
    from ncclprobe.probes.env_propagation import MECHANISMS

    return [m.name for m in MECHANISMS]


@click.command(
    "env-propagation", epilog=EPILOG, short_help="Which ways of setting NCCL variables reach NCCL."
)
@click.option(
    "--mechanism",
    "mechanisms",
    multiple=True,
    type=click.Choice(_mechanism_names()),
    metavar="NAME",
    help=f"Only this mechanism (repeatable; default: all): {', '.join(_mechanism_names())}.",
)
@click.option(
    "--nccl/--no-nccl",
    "nccl",
    default=None,
    help="Fill the 'read by NCCL' column with one-rank communicators (default: when a GPU is present).",
)
@output_option(
    "Keep the specs, results and NCCL logs in this directory (default: a temporary one, removed).",
    dest="workdir",
    directory=True,
    old=("--workdir",),
)
@click.option(
    "--timeout",
    "timeout_s",
    type=Duration(),
    default=180.0,
    show_default=True,
    help="Seconds one mechanism may take.",
)
@format_option
@click.pass_context
def command(ctx, mechanisms, nccl, workdir, timeout_s, fmt):
    """Start a worker by each mechanism (shell export, multiprocessing spawn/fork/forkserver, a
    started pool, torchrun, subprocess env=, the worker's own os.environ or setenv before/after its
    communicator) and report what the worker really sees: in /proc, through C getenv, and what
    NCCL reads.
    """
    from ncclprobe.probes.env_propagation import run_probe, table_rows, verdict

    gpu = _gpu_present()
    if nccl and not gpu:
        raise Unsupported("--nccl needs a CUDA GPU and torch with CUDA; none is usable here")
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    if workdir is not None:
        _check_workdir(workdir)

    def progress(row):
        if not quiet:
            click.echo(f"env-propagation: {row['mechanism']}: {row['status']}", err=True)

    doc = run_probe(
        list(mechanisms) or None,
        nccl=gpu if nccl is None else nccl,
        workdir=workdir,
        timeout_s=timeout_s,
        on_row=progress,
    )
    emit(
        fmt,
        doc,
        table_rows(doc),
        title="env-propagation: what reaches a worker",
        notes=doc["notes"],
    )
    return verdict(doc)


def _gpu_present() -> bool:
    """Whether NCCL can be checked here; without a GPU device node known without torch, whose
    import would be most of a CPU run's time (and delays its Ctrl-C: `ncclprobe.interrupts`)."""
    from ncclprobe.provenance import gpu_device_visible

    if not gpu_device_visible():
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _check_workdir(workdir: str) -> None:
    """New or empty, checked before any mechanism runs: an earlier run's specs and logs never mix
    in. The probe fills it beside itself and moves it into place at the end (`run_probe`)."""
    from ncclprobe.safe_output import check_output_dir

    check_output_dir(workdir, what="--output", has_force=False)
