"""The options that take `sweep` and `env-check` across hosts, shared by both commands.

`@hosts_options` adds them; `take(options)` removes them from a command's keyword arguments and
returns the `ncclprobe.hosts.launchers.Hosts` they describe with the shared directory (None when
the command stays on this host). Each command then makes its one library call across the hosts.
"""

from __future__ import annotations

import shlex

import click

from ncclprobe.cli.types import StrictInt
from ncclprobe.errors import UsageProblem

NAMES = (
    "launcher",
    "hosts",
    "nodes",
    "node_exec",
    "rdzv_endpoint",
    "store_addr",
    "launcher_args",
    "shared_dir",
)

HELP = """\b
Across hosts (--launcher): every node of the job runs it through the launcher you have, from
this one command; what each node leaves in --shared-dir (a directory every node sees) is merged:
  --launcher srun        inside a Slurm allocation (or --launcher-arg=--jobid=ID), --nodes N
  --launcher torchrun    --hosts h1,h2 --node-exec 'ssh {host}' (c10d at the first host)
  --launcher mpirun      --hosts h1,h2 (as root it adds --allow-run-as-root)
  --launcher auto        srun in an allocation, torchrun with --node-exec, else mpirun"""


def hosts_options(command):
    """The options, in help order (click applies decorators bottom-up)."""
    options = (
        click.option(
            "--launcher",
            type=click.Choice(["auto", "srun", "torchrun", "mpirun"]),
            default=None,
            help="Run on every node of a job through this launcher (see below).",
        ),
        click.option(
            "--hosts",
            metavar="HOSTLIST",
            help="The job's nodes in order, as Slurm writes them: node[01-04],gpu7 (torchrun, mpirun; "
            "srun: a --nodelist).",
        ),
        click.option(
            "--nodes",
            type=StrictInt(min=1, max=65536),
            help="srun: nodes of the allocation to use.",
        ),
        click.option(
            "--node-exec",
            metavar="TEMPLATE",
            help="torchrun: how to run a command on a host, {host} its name; the command is passed "
            "as one argument for a shell (ssh {host}, pdsh -w {host}).",
        ),
        click.option(
            "--rdzv-endpoint",
            metavar="HOST:PORT",
            help="torchrun: the c10d rendezvous (default: the first host, port 29400).",
        ),
        click.option(
            "--store-addr",
            metavar="ADDR",
            help="srun, mpirun: this host's address as the nodes reach it (default: its address on the "
            "route to the first host, else its name).",
        ),
        click.option(
            "--launcher-arg",
            "launcher_args",
            multiple=True,
            metavar="ARG",
            help="An argument for the launcher, verbatim (repeatable; write --launcher-arg=--x=y); "
            "torchrun: {host} is the node.",
        ),
        click.option(
            "--shared-dir",
            type=click.Path(file_okay=False),
            help="With --launcher: a new or empty directory every node sees, for the per-node "
            "logs and documents.",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def take(options: dict):
    """Pop the hosts options from `options`; (Hosts, shared dir) or None without --launcher."""
    given = {name: options.pop(name) for name in NAMES}
    if given["launcher"] is None:
        extra = [name for name in NAMES if given[name] not in (None, ())]
        if extra:
            raise UsageProblem(
                f"--{extra[0].replace('_', '-')} is for a run across hosts; add --launcher"
            )
        return None
    from ncclprobe.hosts.hostlist import expand
    from ncclprobe.hosts.launchers import Hosts, detect

    if not given["shared_dir"]:
        raise UsageProblem(
            "--launcher needs --shared-dir: a new or empty directory every node sees, where each "
            "node leaves its logs and results"
        )
    hosts = tuple(expand(given["hosts"])) if given["hosts"] else ()
    node_exec = tuple(shlex.split(given["node_exec"])) if given["node_exec"] else ()
    launcher = detect(given["launcher"], hosts=hosts, node_exec=node_exec)
    return (
        Hosts(
            launcher=launcher,
            hosts=hosts,
            nodes=given["nodes"],
            node_exec=node_exec,
            rdzv_endpoint=given["rdzv_endpoint"],
            store_addr=given["store_addr"],
            launcher_args=tuple(given["launcher_args"]),
        ),
        given["shared_dir"],
    )


def collect_hint(shared_dir: str) -> str:
    return (
        f"the pools that finished are kept in {shared_dir}; make a results file of them with: "
        f"ncclprobe sweep --collect {shlex.quote(shared_dir)}"
    )


def sweep_across(across, asked, *, output, force, criteria, quiet: bool, render):
    """`sweep --launcher ...`: the sweep across hosts as one library call, rendered as a local one."""
    import sys

    from ncclprobe import interrupts
    from ncclprobe.cli.output import Progress
    from ncclprobe.sweep import hosts as sweep_hosts
    from ncclprobe.sweep import session

    hosts, shared_dir = across
    interrupts.set_hint(lambda: collect_hint(shared_dir))

    def started(job) -> None:
        if not quiet:
            click.echo(f"ncclprobe: results go to {job.path}", err=True)

    outcome = sweep_hosts.run(
        session.SessionRequest(
            sweep=asked,
            output=output,
            force=force,
            argv=tuple(sys.argv),
            min_busbw=criteria[0],
            max_latency=criteria[1],
        ),
        hosts,
        shared_dir,
        progress=lambda total, label: Progress(total, label, quiet=quiet),
        started=started,
    )
    interrupts.set_hint(None)
    if not quiet:
        click.echo(f"ncclprobe: results written to {outcome.path}", err=True)
    render(outcome)
    return outcome.verdict


def job_options(command):
    """env-check --launcher: which job, on each node (its pids are not known in advance)."""
    command = click.option(
        "--match",
        metavar="TEXT",
        help="With --launcher: the job's processes are those whose command line contains TEXT.",
    )(command)
    return click.option(
        "--job",
        "job",
        multiple=True,
        metavar="NAME=VALUE",
        help="With --launcher: the job's processes are those whose environment has NAME=VALUE "
        "(SLURM_JOB_ID=1234, TORCHELASTIC_RUN_ID=myrun; repeatable; default in a Slurm allocation: "
        "its SLURM_JOB_ID).",
    )(command)


def across_hosts(options: dict, *, pid, logs, watch_s):
    """env-check's options across hosts popped from `options`: (Hosts, shared dir, --job, --match),
    or None for a check of `--pid` on this host; what contradicts either is refused."""
    job, match = options.pop("job"), options.pop("match")
    across = take(options)
    if across is None:
        if job or match:
            raise UsageProblem("--job and --match find the job on every node; add --launcher")
        if pid is None:
            raise UsageProblem(
                "--pid is required (or --launcher with --job/--match: the job on every node)"
            )
        return None
    if pid or logs or watch_s is not None:
        raise UsageProblem(
            "--launcher finds the job on every node itself; drop --pid, --log and --watch"
        )
    return (*across, job, match)


def env_check_across(across, expect, expect_from, show_all: bool, fmt: str):
    """`env-check --launcher ...`: an agent on every node, one merged verdict."""
    import os

    from ncclprobe.cli.output import emit_report
    from ncclprobe.diagnose.process_env.hosts import hosts_report
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.evidence.live.job_processes import JobSelector
    from ncclprobe.gather.hosts import gather_env_checks
    from ncclprobe.hosts.launchers import Launcher

    hosts, shared_dir, job, match = across
    if not job and not match and hosts.launcher is Launcher.SRUN and os.environ.get("SLURM_JOB_ID"):
        job = (f"SLURM_JOB_ID={os.environ['SLURM_JOB_ID']}",)  # the allocation this runs in
    selector = JobSelector.parse(tuple(job), match)
    agent_args = tuple(word for item in expect for word in ("--expect", item))
    if expect_from:
        from pathlib import Path

        agent_args += ("--expect-from", str(Path(expect_from).resolve()))
    if show_all:
        agent_args += ("--all",)
    report = hosts_report(
        Evidence(hosts=gather_env_checks(hosts, shared_dir, selector, agent_args))
    )
    emit_report(report, fmt)
    return report.verdict()
