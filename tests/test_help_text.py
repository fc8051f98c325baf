"""Every command's --help, walked from the root group: no control character escaped into it (click
prints `\\b` literally where it is not alone at a paragraph's start) and none raw either."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from ncclprobe.cli import cli

ESCAPED = re.compile(r"\\x[01][0-9a-fA-F]|\\x7[fF]")
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...]):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx), (*path, name))


def test_no_command_s_help_holds_a_control_character():
    ctx = click.Context(cli)
    paths = [()] + list(_commands(cli, ctx, ()))
    assert len(paths) > 10  # every command was walked
    runner = CliRunner()
    bad = {}
    for path in paths:
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output[-500:])
        found = ESCAPED.findall(result.output) + RAW.findall(result.output)
        if found:
            bad[" ".join(path)] = found
    assert not bad
