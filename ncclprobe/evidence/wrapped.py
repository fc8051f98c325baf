"""Undo a terminal's wrapping of a pasted log: one logical line per message again.

Why: a log copied from a terminal or a multiplexer's pane (tmux, screen) is broken at the pane's
width, so a watchdog's `Last enqueued NCCL work: 855, last completed NCCL work: 12.` sits on a line
that no longer carries its `[rank1]:` prefix, and a number may be split in two. Such a paste is
recognised by its shape, never by a guess about one line: at least `MIN_ROWS` lines (and
`MIN_SHARE` of the non-empty ones) have exactly the length of the longest line, which is at least
`MIN_WIDTH` characters. Two shapes:
- a pane copied with its padding (tmux, screen): `PADDED_SHARE` of the non-empty rows at that
  width. A row after a full one continues it unless it opens a message of its own (`START`), after
  one space where either side holds the padding. tmux's copy mode writes its position
  (`[75/904]`, cut to `[76/904$` at the edge) over the right end of the rows: removed from such a
  paste only;
- a terminal's bare wrap: a row after a full one continues it where it opens no message; joined
  back directly where it starts with a character (the wrap broke a word or a number), after one
  space where it starts with one.
In both, only a message is continued: a row joins the line before it only where that line opens
with `START` (a rank or log-level prefix in brackets, NCCL's `host:pid:tid [dev]` prefix, a date, a
traceback's header or frame, an exception line, torchrun's summary), so the rows of a table at
the width (nvidia-smi's boxes, nccl-tests' rows, a P2P matrix) stay as they are.
"""

from __future__ import annotations

from ncclprobe.numbers import ascii_re

MIN_WIDTH = 80
MIN_ROWS = 3
MIN_SHARE = 0.3
PADDED_SHARE = 0.9

_COUNTER = ascii_re(r"\s*\[\d{1,9}/\d{1,9}[\]$]?\s*$")
START = ascii_re(
    r"^(?:\[|\S+:\d+:\d+ \[\d+\]|\d{4}-\d\d-\d\d|Traceback|frame #\d|Exception raised|"
    r"terminate called|what\(\):|File \"|[A-Za-z_][\w.]*(?:Error|Exception): |Root Cause|Failures:|"
    r"={5}|-{5})"
)


def is_wrapped(lines: list[str]) -> bool:
    """The shape of a paste broken at a fixed width (see the module's docstring)."""
    lengths = [len(line) for line in lines if line.strip()]
    if len(lengths) < MIN_ROWS:
        return False
    width = max(lengths)
    full = lengths.count(width)
    return width >= MIN_WIDTH and full >= MIN_ROWS and full >= MIN_SHARE * len(lengths)


def unwrap(lines: list[str]) -> list[str]:
    """The logical lines of `lines` where they are a wrapped paste; else `lines` unchanged."""
    if not is_wrapped(lines):
        return lines
    width = max(len(line) for line in lines)
    rows = [line for line in lines if line.strip()]
    padded = sum(len(line) == width for line in rows) >= PADDED_SHARE * len(rows)
    out: list[str] = []
    cut = gap = False  # the last row reached the width (the next may continue it); ended in padding
    for row in lines:
        full = len(row) == width
        text = _COUNTER.sub("", row) if full and padded else row
        opens = not text.strip() or START.match(text.lstrip()) is not None
        message = bool(out) and START.match(out[-1].lstrip()) is not None
        if cut and message and not opens:
            joint = " " if gap or text[:1].isspace() else ""
            out[-1] = out[-1] + joint + text.strip()
        else:
            out.append(text.rstrip())
        cut, gap = full, text != text.rstrip() or (full and len(text) < len(row))
    return out
