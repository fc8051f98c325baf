"""Shared CLI conventions: the --format option, rendering data to stdout, progress to stderr.

Every data-producing command builds one JSON-able document (with `schema_version` and units in
key names) and a list of table rows; `emit` prints one of table, JSON or CSV to stdout. Nothing
else writes to stdout.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import click

from ncclprobe.cli.table import (
    cut_long_cells,
    left_out_note,
    note_lines,
    render_table,
    terminal_width,
)
from ncclprobe.visible import write_control

FORMATS = ("table", "json", "csv")

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Output format on stdout.",
)

# every command that writes a file takes this flag; `ncclprobe.safe_output` enforces it
force_option = click.option(
    "--force",
    is_flag=True,
    help="Replace an output file or directory that exists (default: refuse).",
)


class AliasedOption(click.Option):
    """An option with old spellings that still work but are not shown (`--out` for `--output`):
    help and error messages name only the current one."""

    def __init__(self, *args, hidden_aliases: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.hidden_aliases = tuple(hidden_aliases)

    def _shown(self, method, ctx):
        opts, self.opts = self.opts, [o for o in self.opts if o not in self.hidden_aliases]
        try:
            return method(ctx)
        finally:
            self.opts = opts

    def get_help_record(self, ctx):
        return self._shown(super().get_help_record, ctx)

    def get_error_hint(self, ctx):
        return self._shown(super().get_error_hint, ctx)


def output_option(
    help: str,
    *,
    dest: str = "output",
    directory: bool = False,
    required: bool = False,
    old: tuple[str, ...] = (),
):
    """`--output`: the one spelling of every file or directory a command writes. `old`: earlier
    spellings, accepted and hidden, so scripts written for them keep working."""
    kind = click.Path(file_okay=False) if directory else click.Path(dir_okay=False)
    return click.option(
        "--output",
        *old,
        dest,
        cls=AliasedOption,
        hidden_aliases=old,
        type=kind,
        required=required,
        help=help,
    )


def emit(
    fmt: str,
    doc: Any,
    rows: Sequence[dict] | None = None,
    *,
    title: str | None = None,
    notes: Iterable[str] = (),
) -> None:
    """Print `doc` as JSON, or `rows` as a table/CSV. `notes` become `#` lines above a table. A
    table fits the terminal (`ncclprobe.cli.table`); JSON and CSV are always complete."""
    if fmt == "json":
        click.echo(
            json.dumps(doc, indent=2, sort_keys=False, default=_json_default, allow_nan=False)
        )
        return
    rows = list(rows if rows is not None else [])
    if fmt == "csv":
        click.echo(to_csv(rows), nl=False)
        return
    width = terminal_width()
    cut = None
    if width is not None:  # --wide prints every cell whole
        rows, cut = cut_long_cells(rows)
    lines = note_lines(([title] if title else []) + list(notes) + ([cut] if cut else []), width)
    if rows:
        table, left_out = render_table(rows, width)
        if left_out and width is not None:  # columns are left out only to fit a width
            lines += note_lines([left_out_note(left_out, width)], width)
        lines.append(table)
    click.echo("\n".join(lines))


def emit_report(report, fmt: str) -> None:
    """Print a judging command's `Report` (`ncclprobe.diagnose.report`) through its one renderer
    (`ncclprobe.diagnose.render`): JSON its document, CSV its rows, a table its sections in order,
    text fitted to the terminal and tables fitted as `emit` fits them."""
    from ncclprobe.diagnose.render import table_blocks
    from ncclprobe.diagnose.report import Lines

    if fmt != "table":
        emit(fmt, report.to_json(), report.rows)
        return
    for block in table_blocks(report, terminal_width()):
        if isinstance(block, Lines):
            click.echo("\n".join(block.lines))
        else:
            emit(fmt, None, block.rows, title=block.title, notes=block.notes)


def to_csv(rows: Sequence[dict]) -> str:
    if not rows:
        return ""
    fields: list[str] = []
    for row in rows:
        fields += [key for key in row if key not in fields]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _csv_value(v) for k, v in row.items()} for row in rows)
    return buf.getvalue()


CSV_DIGITS = 10  # significant digits of a float in CSV: a measurement's, without binary noise


def _csv_value(value: Any) -> Any:
    """A float to CSV_DIGITS significant digits: 3551.9555600000003 (a sum's binary rounding, not
    a measured digit) is 3551.95556; integers and text as they are. JSON keeps the full float."""
    if isinstance(value, float) and math.isfinite(value):
        return format(value, f".{CSV_DIGITS}g")
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class Progress:
    """Progress with an ETA on stderr: a bar on a terminal, one line per step otherwise.

    Silent under -q. Usage: `with Progress(total, "sweep") as p: p.advance("config 3")`.
    """

    def __init__(self, total: int, label: str, *, quiet: bool = False, stream=None, done: int = 0):
        """`done`: steps already finished when the clock starts (the rate counts only later ones)."""
        self.total, self.label, self.quiet = max(total, 1), label, quiet
        self.stream = stream or sys.stderr
        self.done, self.started = done, time.monotonic()
        self.initial = done

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if not self.quiet and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()

    def advance(self, what: str = "", steps: int = 1) -> None:
        self.done += steps
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        timed = self.done - self.initial
        eta = elapsed / timed * (self.total - self.done) if timed > 0 else 0.0
        pct = 100.0 * self.done / self.total
        if self.stream.isatty():
            width = 30
            filled = int(width * self.done / self.total)
            bar = "#" * filled + "-" * (width - filled)
            write_control(self.stream, "\r")
            self.stream.write(f"{self.label} [{bar}] {pct:5.1f}% eta {eta:5.0f}s {what[:40]:<40}")
        else:
            self.stream.write(
                f"{self.label}: {self.done}/{self.total} ({pct:.0f}%) eta {eta:.0f}s {what}\n"
            )
        self.stream.flush()
