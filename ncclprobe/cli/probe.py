"""`ncclprobe probe`: measurements that answer one question each, run in fresh worker processes.

Subcommands load lazily, like the top-level group: a probe whose module is not part of this build
is simply not listed.
"""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes, load_target

PROBES = {
    "custom-allreduce": "ncclprobe.cli.probe_custom_allreduce:command",
    "env-propagation": "ncclprobe.cli.probe_env_propagation:command",
    "graph-capture": "ncclprobe.cli.probe_graph_capture:command",
}

EPILOG = f"""\b
Examples:
  ncclprobe probe env-propagation
  ncclprobe probe env-propagation --mechanism fork --mechanism forkserver-after-start
  ncclprobe probe graph-capture
  ncclprobe probe custom-allreduce --share-gpu 2

{
    exit_codes(
        "the probe measured what it asks (each probe's --help says exactly)",
        "the probe found a problem",
        "the probe cannot run here (no GPU, too few GPUs)",
    )
}
"""


class LazyProbes(click.Group):
    def list_commands(self, ctx):
        return sorted(name for name in PROBES if self.get_command(ctx, name) is not None)

    def get_command(self, ctx, name):
        return load_target(PROBES.get(name))


@click.group(
    "probe",
    cls=LazyProbes,
    epilog=EPILOG,
    short_help="Focused measurements (env propagation, graph capture, custom all-reduce).",
)
def group():
    """Focused measurements that each answer one question about how NCCL behaves in a worker."""
