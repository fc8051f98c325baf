"""Tables and note lines that fit the terminal.

A table wider than the terminal first wraps its text columns (the widest cut to one common width,
none below `MIN_TEXT` characters), then leaves out its last columns, and says which with the flags that show them
(`--wide`, or `--format json/csv`, which are always complete). Note lines (`# ...`) wrap under
their first line. `--wide` (any command, before or after it) prints everything unwrapped.
Columns come in order of importance: the first ones stay. A cell longer than MAX_CELL characters
(a log's 1 MB value) is cut, with a note, before any of this: wrapping one long word took tabulate
17 s for 1 MB and did not finish for 10 MB; `--wide` and JSON/CSV keep it whole.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence

import click
from tabulate import tabulate

from ncclprobe.visible import visible

FALLBACK_COLUMNS = 100  # not a terminal and no COLUMNS: what a pasted block reads well at
MIN_TEXT = 16  # a text column is wrapped no narrower than this (or its header)
MAX_NAME = 32  # ... nor, in a column of names, below its longest name up to this
FLOAT_FORMAT = ".2f"
MAX_CELL = 1000  # characters of a cell in a fitted table: ten lines of a wide terminal
MISSING = "-"


def terminal_width() -> int | None:
    """Columns a table may use: None under --wide, else the terminal's (COLUMNS first)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and (ctx.find_root().obj or {}).get("wide"):
        return None
    return shutil.get_terminal_size((FALLBACK_COLUMNS, 24)).columns


def cut_long_cells(rows: Sequence[dict]) -> tuple[list[dict], str | None]:
    """The rows with every text cell longer than MAX_CELL cut there, and the note that says so
    (None when nothing was cut)."""
    cut, out = 0, []
    for row in printable_rows(rows):
        long = {k for k, v in row.items() if isinstance(v, str) and len(v) > MAX_CELL}
        cut += len(long)
        out.append(
            {
                k: f"{v[:MAX_CELL]}... ({len(v)} characters)" if k in long else v
                for k, v in row.items()
            }
            if long
            else row
        )
    note = (
        f"{cut} cell(s) longer than {MAX_CELL} characters cut (all of them whole with --wide, or "
        "--format csv/json)"
    )
    return out, note if cut else None


def render_table(rows: Sequence[dict], width: int | None) -> tuple[str, list[str]]:
    """(the table, the names of the columns left out to fit `width`; None: all of them)."""
    rows = printable_rows(rows)
    headers = _headers(rows)
    cells = {h: [_cell(row.get(h)) for row in rows] for h in headers}
    natural = {h: max([len(h)] + [_longest_line(c) for c in cells[h]]) for h in headers}
    widths, shown = dict(natural), list(headers)
    table = _tabulate(rows, shown, widths, natural)
    while width is not None and _widest_line(table) > width:
        floor = {h: max(MIN_TEXT, len(h), _name_width(cells[h])) for h in headers}
        text = [h for h in shown if _is_text(cells[h]) and widths[h] > floor[h]]
        if text:
            widths.update(_level(widths, text, floor, _widest_line(table) - width))
        elif len(shown) > 1:
            shown.pop()
        else:
            break
        table = _tabulate(rows, shown, widths, natural)
    return table, headers[len(shown) :]


def _level(
    widths: dict[str, int], text: list[str], floor: dict[str, int], excess: int
) -> dict[str, int]:
    """The widest text columns cut to one common width (none below its floor: MIN_TEXT, its header,
    the longest name of a column of names) until `excess` characters are saved: two
    long columns share the room instead of one shrinking to MIN_TEXT while the other stays wide."""
    level = max(widths[h] for h in text)
    while level > 0 and sum(max(0, widths[h] - max(level, floor[h])) for h in text) < excess:
        level -= 1
    return {h: min(widths[h], max(level, floor[h])) for h in text}


def _tabulate(rows, shown: list[str], widths: dict[str, int], natural: dict[str, int]) -> str:
    """Floats get FLOAT_FORMAT; a number the caller formatted itself (a string, such as three
    significant digits of a CPU busbw, 0.00123) is printed as given, right-aligned, not reparsed."""
    kinds = [_kind([row.get(h) for row in rows]) for h in shown]
    return tabulate(
        [{h: row.get(h) for h in shown} for row in rows],
        headers="keys",
        tablefmt="simple",
        floatfmt=FLOAT_FORMAT,
        missingval=MISSING,
        disable_numparse=[i for i, kind in enumerate(kinds) if kind == "formatted"] or False,
        colalign=[{"formatted": "right", "number": "decimal"}.get(kind, "left") for kind in kinds],
        maxcolwidths=[widths[h] if widths[h] < natural[h] else None for h in shown],
    )


def _kind(values: list) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, str) and _numeric(v) for v in present):
        return "formatted"
    if present and all(
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        or isinstance(v, str)
        and _numeric(v)
        for v in present
    ):
        return "number"
    return "text"


def _widest_line(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def note_lines(notes: Sequence[str], width: int | None) -> list[str]:
    """`# note` lines, each wrapped to `width` under its first line."""
    lines = []
    for note in map(visible, notes):
        if width is None:
            lines.append(f"# {note}")
        else:
            lines += textwrap.wrap(
                note,
                width=max(20, width),
                initial_indent="# ",
                subsequent_indent="#   ",
                break_on_hyphens=False,
                break_long_words=False,
            ) or ["#"]
    return lines


def left_out_note(columns: Sequence[str], width: int) -> str:
    return (
        f"columns left out to fit {width} columns: {', '.join(columns)} (all of them with --wide, "
        f"or --format csv/json)"
    )


def printable_rows(rows: Sequence[dict]) -> list[dict]:
    """The rows as a table prints them: every header and text cell through `visible` (an escape
    sequence from an input shown as `\\x1b[2J`), so widths are measured on what is printed."""
    return [
        {visible(str(k)): visible(v) if isinstance(v, str) else v for k, v in row.items()}
        for row in rows
    ]


def _headers(rows: Sequence[dict]) -> list[str]:
    headers: list[str] = []
    for row in rows:
        headers += [key for key in row if key not in headers]
    return headers


def _cell(value) -> str:
    if value is None:
        return MISSING
    if isinstance(value, float):
        return format(value, FLOAT_FORMAT)
    return str(value)


def _is_text(cells: list[str]) -> bool:
    """A column tabulate can wrap: words, not numbers."""
    return any(" " in c or "," in c or len(c) > MIN_TEXT for c in cells) and not all(
        _numeric(c) for c in cells
    )


def _numeric(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return cell == MISSING
    return True


def _name_width(cells: list[str]) -> int:
    """A column of names (one word per cell, such as NCCL_TUNER_CONFIG_FILE) is never split below
    its longest name, up to MAX_NAME; sentences wrap at spaces instead."""
    names = all(len(cell.split()) <= 1 for cell in cells)
    return min(MAX_NAME, max((len(cell) for cell in cells), default=0)) if names else MIN_TEXT


def _longest_line(cell: str) -> int:
    return max((len(line) for line in cell.splitlines()), default=0)
