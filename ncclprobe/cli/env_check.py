"""`ncclprobe env-check --pid PID`: which NCCL settings each process of a running job really has."""

from __future__ import annotations

import json
import logging
import time

import click

from ncclprobe import interrupts
from ncclprobe.cli import exit_codes
from ncclprobe.cli.hosts import HELP as HOSTS_HELP
from ncclprobe.cli.hosts import across_hosts, env_check_across, hosts_options, job_options
from ncclprobe.cli.output import emit_report, format_option, to_csv
from ncclprobe.cli.types import Duration, StrictInt
from ncclprobe.errors import UsageProblem
from ncclprobe.verdict import Verdict

log = logging.getLogger("ncclprobe.env_check")

EPILOG = f"""\b
Examples:
  ncclprobe env-check --pid 4242
  ncclprobe env-check --pid 4242 --expect NCCL_PROTO=LL --expect NCCL_P2P_LEVEL=SYS
  ncclprobe env-check --pid 4242 --expect-from recommendation.json --format json
  ncclprobe env-check --pid 4242 --log /tmp/nccl.host.4250.log --log /tmp/nccl.host.4251.log
  ncclprobe env-check --pid 4242 --watch 2 --count 10
  ncclprobe env-check --launcher srun --expect NCCL_PROTO=LL --shared-dir /shared/ec  # in salloc
  ncclprobe env-check --launcher mpirun --hosts 'n[1-4]' --match train.py --shared-dir /shared/ec

{HOSTS_HELP}

{
    exit_codes(
        "expectations met and no lint errors",
        "findings",
        "nothing readable",
        interrupted="a --watch ends with the snapshots it printed",
    )
}
"""


@click.command(
    "env-check", epilog=EPILOG, short_help="NCCL settings of every process of a running job."
)
@click.option(
    "--pid",
    "pid",
    type=StrictInt(min=1, max=2**31 - 1),
    help="Root of the job's process tree (required unless --launcher).",
)
@click.option(
    "--expect", "expect", multiple=True, metavar="NAME=VALUE", help="Expected setting (repeatable)."
)
@click.option(
    "--expect-from",
    "expect_from",
    type=click.Path(dir_okay=False),
    default=None,
    help="A recommendation JSON file (ncclprobe recommend --emit json); its env is expected.",
)
@click.option(
    "--log",
    "logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="NCCL_DEBUG=INFO log of a process of the job (repeatable): cross-check what NCCL read.",
)
@click.option(
    "--all", "show_all", is_flag=True, help="Show every variable (secret-looking values masked)."
)
@click.option(
    "--watch",
    "watch_s",
    type=Duration(min_s=0.0, max_s=86400.0),
    default=None,
    metavar="SECONDS",
    help="Re-check every SECONDS as workers come and go (JSON: one document per line per check).",
)
@click.option(
    "--count",
    type=StrictInt(min=0, max=10**9),
    default=None,
    help="With --watch: how many checks (default 0: until interrupted).",
)
@job_options
@hosts_options
@format_option
@click.pass_context
def command(ctx, pid, expect, expect_from, logs, show_all, watch_s, count, fmt, **hosts):
    """Walk PID and all its descendants; show each one's role, whether it loaded libnccl, its GPUs,
    the NCCL/CUDA/torch.distributed variables of its environment and what differs from its parent.
    Check expectations and lint every process. Secrets are never printed, in any format.
    """
    from ncclprobe.diagnose.process_env.check import env_check_report
    from ncclprobe.diagnose.process_env.expect import load_recommendation, parse_expect
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.gather.processes import gather_processes

    across = across_hosts(hosts, pid=pid, logs=logs, watch_s=watch_s)  # --launcher: every node
    if across:
        return env_check_across(across, expect, expect_from, show_all, fmt)
    if count is not None and watch_s is None:
        raise UsageProblem(
            "--count is the number of --watch checks; add --watch SECONDS (or drop --count)"
        )
    expectations = parse_expect(expect) + (load_recommendation(expect_from) if expect_from else [])

    def check(snapshot: int | None = None):
        processes = gather_processes(
            pid, expectations=expectations, log_paths=logs, show_all=show_all
        )
        return env_check_report(Evidence(processes=processes), snapshot)

    if watch_s is None:
        report = check()
        emit_report(report, fmt)
        return report.verdict()
    return _watch(check, fmt, watch_s, count or 0, quiet=bool(ctx.obj and ctx.obj.get("quiet")))


def _render(report, fmt: str, snapshot: int) -> None:
    """One --watch snapshot: JSON Lines (a document per snapshot), CSV rows under one header, or
    the table titled with the snapshot's number."""
    if fmt == "json":
        doc = {**report.to_json(), "snapshot": snapshot, "time": time.time()}
        click.echo(json.dumps(doc, allow_nan=False))
    elif fmt == "csv":
        text = to_csv([{"snapshot": snapshot, **row} for row in report.rows])
        click.echo(text if snapshot == 1 else text.split("\n", 1)[-1], nl=False)
    else:
        emit_report(report, fmt)


def _watch(check, fmt: str, interval_s: float, count: int, quiet: bool) -> Verdict:
    """Re-check until `count` snapshots (0: until interrupted) or the root process is gone."""
    previous: dict[int, str] = {}
    verdict, snapshot = Verdict.NOTHING_HERE, 0
    interrupts.set_hint(
        lambda: f"the watch stopped after {snapshot} snapshot(s), all printed above"
    )
    while count == 0 or snapshot < count:
        if snapshot:
            time.sleep(interval_s)
        try:
            report = check(snapshot + 1)
        except UsageProblem:
            if not snapshot:
                raise
            log.info("the root process is gone; stopping the watch")
            break
        snapshot += 1
        current = {p.info.pid: p.info.role for p in report.data["processes"] if p.live}
        _report_changes(previous, current, snapshot, quiet)
        previous, verdict = current, report.verdict()
        _render(report, fmt, snapshot)
    interrupts.set_hint(None)
    return verdict


def _report_changes(
    previous: dict[int, str], current: dict[int, str], snapshot: int, quiet: bool
) -> None:
    if quiet or snapshot == 1:
        return
    for pid in sorted(set(current) - set(previous)):
        click.echo(f"snapshot {snapshot}: appeared: pid {pid} ({current[pid]})", err=True)
    for pid in sorted(set(previous) - set(current)):
        click.echo(f"snapshot {snapshot}: gone: pid {pid} ({previous[pid]})", err=True)
