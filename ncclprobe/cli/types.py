"""Click parameter types over `ncclprobe.numbers`: every number on the command line is parsed one way.

Use them for new options (`type=StrictInt(min=1)`, `type=Duration()`, `type=Version()`). Options
that still say `type=int`, `type=float`, `click.IntRange` or `click.FloatRange` are converted to
these on load (`harden`, called for every command by `ncclprobe.cli.load_target`), so no command can
accept `nan`, `inf`, `²` or a 5000-digit number even when its author forgot.
"""

from __future__ import annotations

import click

from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import (
    MAX_DURATION_S,
    check_float,
    check_int,
    parse_duration,
    parse_float,
    parse_int,
    parse_version,
)


class _Strict(click.ParamType):
    """Turns the library's UsageProblem into click's usage error (exit 2, one line)."""

    def convert(self, value, param, ctx):
        if value is None:
            return None
        try:
            return self.parse(value, _label(param))
        except UsageProblem as exc:  # the message names the option already
            raise click.UsageError(str(exc), ctx) from None

    def parse(self, value, what: str):  # pragma: no cover - every type defines it
        raise NotImplementedError


class StrictInt(_Strict):
    name = "integer"

    def __init__(self, min: int | None = None, max: int | None = None):
        self.min, self.max = min, max

    def parse(self, value, what):
        if isinstance(value, int) and not isinstance(value, bool):  # a default
            return check_int(value, what, min=self.min, max=self.max)
        return parse_int(str(value), what, min=self.min, max=self.max)


class StrictFloat(_Strict):
    name = "number"

    def __init__(
        self,
        min: float | None = None,
        max: float | None = None,
        min_open: bool = False,
        max_open: bool = False,
    ):
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def parse(self, value, what):
        bounds = dict(min=self.min, max=self.max, min_open=self.min_open, max_open=self.max_open)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return check_float(value, what, **bounds)
        return parse_float(str(value), what, **bounds)


class Duration(StrictFloat):
    """Seconds, above `min_s` (exclusive: 0 is no bound at all) and at most `max_s`."""

    name = "seconds"

    def __init__(self, min_s: float = 0.0, max_s: float = MAX_DURATION_S):
        super().__init__(min=min_s, max=max_s, min_open=True)

    def parse(self, value, what):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return super().parse(value, what)
        return parse_duration(str(value), what, min_s=self.min, max_s=self.max)


class Version(_Strict):
    """A version string (`2.28.9`, `2.29.7+cuda12.9`), returned as typed once it parses."""

    name = "version"

    def parse(self, value, what):
        parse_version(str(value), what)
        return str(value).strip()


class NonEmpty(_Strict):
    """A string that is not empty or blank (an empty VARIABLE or name is a typo, not a request)."""

    name = "text"

    def parse(self, value, what):
        text = str(value)
        if not text.strip():
            raise UsageProblem(f"{what} is empty")
        return text


def _label(param) -> str:
    if param is None:
        return "value"
    if isinstance(param, click.Option) and param.opts:
        return max(param.opts, key=len)
    return (param.human_readable_name or "value").upper()


def harden(command: click.Command) -> click.Command:
    """Replace click's lenient number types in `command` (and a group's loaded subcommands) by the
    strict ones, keeping every bound. Idempotent."""
    for param in command.params:
        strict = _strict_type(param.type)
        if strict is not None:
            param.type = strict
    for sub in getattr(command, "commands", {}).values():
        harden(sub)
    return command


def _strict_type(kind: click.ParamType) -> click.ParamType | None:
    if isinstance(kind, click.IntRange):
        low = kind.min if kind.min is None or not kind.min_open else kind.min + 1
        high = kind.max if kind.max is None or not kind.max_open else kind.max - 1
        return StrictInt(min=low, max=high)
    if isinstance(kind, click.FloatRange):
        return StrictFloat(
            min=kind.min, max=kind.max, min_open=kind.min_open, max_open=kind.max_open
        )
    if kind is click.INT:
        return StrictInt()
    if kind is click.FLOAT:
        return StrictFloat()
    return None
