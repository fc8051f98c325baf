"""`ncclprobe probe`: measurements that answer one question each, run in fresh worker processes.

Subcommands load lazily, like the top-level group: a probe whose module is not part of this build
is simply not listed.
"""

from __future__ import annotations

import importlib

import click

PROBES = {
    "env-propagation": "ncclprobe.cli.probe_env_propagation:command",
    "graph-capture": "ncclprobe.cli.probe_graph_capture:command",
}

EPILOG = """\b
Examples:
  ncclprobe probe env-propagation
  ncclprobe probe env-propagation --mechanism fork --mechanism forkserver-after-start --format json
  ncclprobe probe graph-capture
"""


class LazyProbes(click.Group):
    def list_commands(self, ctx):
        return sorted(name for name in PROBES if self.get_command(ctx, name) is not None)

    def get_command(self, ctx, name):
        target = PROBES.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # probe not built yet; any other missing module is a bug
                return None
            raise
        return getattr(module, attr)


@click.group("probe", cls=LazyProbes, epilog=EPILOG, short_help="Focused measurements (env propagation, graph capture).")
def group():
    """Focused measurements that each answer one question about how NCCL behaves in a worker."""
