"""`ncclprobe capture [options] -- CMD ...`: run the user's own job with the evidence on, then diagnose it."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import force_option, format_option, output_option
from ncclprobe.cli.types import StrictFloat, StrictInt
from ncclprobe.errors import UsageProblem
from ncclprobe.verdict import Verdict

EPILOG = f"""\b
Examples:
  ncclprobe capture -- torchrun --nproc-per-node 8 train.py
  ncclprobe capture --hang-after 120 --output cap/ -- python -m sglang.launch_server ...
  ncclprobe capture --server http://127.0.0.1:30000 -- python -m sglang.launch_server ...
  ncclprobe capture --profile 10-14 -- python generate.py
  ncclprobe diagnose --capture cap/      # the diagnosis again, from the directory alone

\b
While it runs: Ctrl-C reaches the job as it would without the capture (a third Ctrl-C ends what is
left of it); SIGUSR1 to the capture asks every process for its dumps; SIGUSR2 starts or stops the
profiler with --profile control.

{
    exit_codes(
        "the job succeeded and the diagnosis found nothing above informational",
        "the job succeeded and the diagnosis has findings",
        interrupted="the job's own code (130 after Ctrl-C) with the directory finished",
    )
}
Where the job failed, or was ended for a hang or by Ctrl-C, the capture exits with the job's own
code (a signal N as 128+N).
"""


def _profile(value: str):
    from ncclprobe.capture.session import Profile

    text = value.strip().lower()
    if text in ("off", "control"):
        return Profile(mode=text)
    start, sep, stop = text.partition("-")
    if not sep or not start.isdigit() or not stop.isdigit():
        raise UsageProblem(
            f"--profile {value!r}: give steps as FIRST-LAST (3-6), or `off`, or `control`"
        )
    first, last = int(start), int(stop)
    if not 1 <= first <= last <= 10**6:
        raise UsageProblem(f"--profile {value!r}: steps count from 1, FIRST <= LAST")
    return Profile(mode="steps", start=first, stop=last)


@click.command(
    "capture",
    epilog=EPILOG,
    short_help="Run your own job with the evidence on, then diagnose it.",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@output_option("The capture directory (default: a new capture-<time>/ here).", directory=True)
@force_option
@click.option(
    "--hang-after",
    "hang_after",
    type=StrictFloat(min=0.0, max=7 * 86400.0),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="End the job as hung after this long without progress (no output, no step of any "
    "process), once every rank has dumped; 0: never.",
)
@click.option(
    "--profile",
    "profile",
    default="3-6",
    show_default=True,
    metavar="FIRST-LAST|off|control",
    help="torch.profiler in every process over these steps (a step is one top-level nn.Module "
    "forward), `control` (SIGUSR2 starts and stops it), or `off`.",
)
@click.option(
    "--nccl-tuning", is_flag=True, help="NCCL's per-call TUNING lines too (large on long jobs)."
)
@click.option(
    "--server",
    "server_url",
    default=None,
    metavar="URL",
    help="The job is a server with an OpenAI-compatible API at this loopback URL: once it answers, "
    "profile it around a short load, then end it.",
)
@click.option(
    "--requests",
    type=StrictInt(min=1, max=10000),
    default=8,
    show_default=True,
    help="With --server: requests of the load.",
)
@click.option(
    "--prompt",
    default="Explain in one paragraph what an all-reduce does.",
    show_default=True,
    help="With --server: the prompt of every request.",
)
@click.option(
    "--max-tokens",
    "max_tokens",
    type=StrictInt(min=1, max=100000),
    default=32,
    show_default=True,
    help="With --server: tokens per request.",
)
@click.option(
    "--server-timeout",
    "server_timeout",
    type=StrictFloat(min=1.0, max=86400.0),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="With --server: how long the server may take to answer.",
)
@format_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(
    output,
    force,
    hang_after,
    profile,
    nccl_tuning,
    server_url,
    requests,
    prompt,
    max_tokens,
    server_timeout,
    fmt,
    command,
):
    """Run CMD unchanged, with the evidence a diagnosis needs switched on by environment alone:
    NCCL's log per process, PyTorch's Flight Recorder dumped on a hang (gloo included, by capture's
    module inside the job), torch.profiler over a few steps of every process (or an SGLang/vLLM
    server's own profiler around a short load), every worker's environment read as it appears.
    It ends at the job's exit, at a hang (--hang-after) or at Ctrl-C, writes one directory with
    every file and a manifest of what was and was not collected, and prints the diagnosis."""
    from pathlib import Path

    from ncclprobe.capture.server import ServerRequest
    from ncclprobe.capture.session import CaptureRequest, check

    if not command:
        raise UsageProblem("give the command to capture after `--`: ncclprobe capture -- CMD ...")
    server = None
    if server_url:
        server = ServerRequest.of(server_url, requests, prompt, max_tokens, server_timeout)
    request = CaptureRequest(
        command=tuple(command),
        output=Path(output) if output else None,
        force=force,
        hang_after_s=hang_after or None,
        profile=_profile(profile),
        tuning=nccl_tuning,
        server=server,
        job_stdout_to_stderr=fmt != "table",
    )
    check(request)
    return _run(request, fmt)


def _run(request, fmt: str) -> int | Verdict:
    from ncclprobe import interrupts
    from ncclprobe.capture.diagnosis import diagnose_capture
    from ncclprobe.capture.session import capture
    from ncclprobe.cli.output import emit_report
    from ncclprobe.diagnose.render import text
    from ncclprobe.evidence.live import capture_dir as D
    from ncclprobe.safe_output import write_text

    def started(path):
        where = "" if fmt == "table" else "; its stdout goes to stderr, stdout is the report's"
        click.echo(f"ncclprobe: capture: {path}/ (the job's output follows{where})", err=True)
        interrupts.set_hint(f"the capture directory {path}/ was not finished")

    captured = capture(request, started)
    interrupts.set_hint(None)
    directory = captured.directory
    click.echo(
        f"ncclprobe: capture: the job ended ({_ended(captured)}); diagnosing {directory}/", err=True
    )
    report, _ev = diagnose_capture(directory)
    write_text(directory / D.DIAGNOSIS, text(report, None) + "\n", force=True)
    emit_report(report, fmt)
    click.echo(f"ncclprobe: capture: {directory}/ (manifest.json, {D.DIAGNOSIS})", err=True)
    if captured.job_failed:
        return captured.ending.exit_code or 1
    return report.verdict()


def _ended(captured) -> str:
    ending = captured.ending
    words = {
        "exit": "it exited",
        "hang": "no progress: dumped and ended",
        "interrupt": "interrupted",
        "terminated": "terminated (SIGTERM passed on)",
        "server-done": "load and profile done, server stopped",
    }
    return f"{words.get(ending.ended_by, ending.ended_by)}, exit code {ending.exit_code}"
