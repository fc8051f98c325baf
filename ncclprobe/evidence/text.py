"""Cleaning of captured terminal text, shared by every evidence reader.

Real captures carry decorations that are not part of what the tool printed: ANSI colour and
underline escapes (nvidia-smi underlines its header even into a pipe), mpirun's
`[1,N]<stdout>:` tags, srun's `N: ` task labels, and timestamps added by log collectors. Readers strip them here, the
same way, before matching anything.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import ascii_re
from ncclprobe.validate import (
    DEFAULT_LIMIT,
    limit_of,
    open_input,
    read_text,
    text_encoding,
    too_large,
)

CHUNK = 1 << 20
MAX_LINE = 64 << 20  # characters without a line break: handed on in pieces of this size

_ANSI = ascii_re(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_MPIRUN_TAG = ascii_re(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
_TIMESTAMP = ascii_re(
    r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+"
)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def clean_line(line: str) -> str:
    """One captured line without escapes, an mpirun tag or a leading timestamp; right-stripped.
    Each pattern runs only where it can match (a log has millions of lines; most carry none)."""
    line = strip_ansi(line).rstrip()
    if line[:1] == "[":
        line = _MPIRUN_TAG.sub("", line)
    if line[:1] in _TIMESTAMP_STARTS:
        line = _TIMESTAMP.sub("", line)
    return line


_TIMESTAMP_STARTS = frozenset("[0123456789")
# `srun --label` and `pdsh` put the task number before every line (`0: #  size  count ...`); only the
# readers of benchmark output strip it: in other text a leading `N: ` may be content
_TASK_LABEL = ascii_re(r"^\s*\d{1,6}: ")


def clean_task_line(line: str) -> str:
    """`clean_line`, and then without an srun/pdsh task label."""
    line = clean_line(line)
    return _TASK_LABEL.sub("", line) if ": " in line[:10] else line


def read_text_file(path: str | Path, what: str) -> str:
    """Read a user's evidence file (UTF-8, or UTF-16/32 as Windows tools write it); unreadable,
    binary or oversized files are a UsageProblem naming the file (`ncclprobe.validate`)."""
    return read_text(path, what)


def read_text_lines(path: str | Path, what: str) -> Iterator[str]:
    """The lines of a user's evidence file, read a chunk at a time: a log of a gigabyte is never
    whole in memory (as text it took 2.6 times its size). The checks of `read_text_file` hold: the
    size limit, a binary start refused, UTF-16/32 recognised, undecodable bytes replaced."""
    limit = limit_of(DEFAULT_LIMIT)
    with open_input(path, what) as handle:
        info = os.fstat(handle.fileno())
        if info.st_size > limit:
            raise UsageProblem(too_large(f"{what} {str(path)!r}", limit))
        data = handle.read(65536)
        encoding, skip = text_encoding(data, path, what)
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        parts, size, total, data, first = [], 0, len(data), data[skip:], True
        while True:
            text = decoder.decode(data, final=not data)
            if first and "\x00" in text[:65536]:
                raise UsageProblem(f"{what} {str(path)!r} is a binary file, not text")
            first = False
            cut = len(text) if not data else text.rfind("\n") + 1  # a split line waits
            parts.append(text)
            size += len(text)
            if cut or size > MAX_LINE:
                whole = "".join(parts)
                cut = len(whole) if size > MAX_LINE else len(whole) - len(text) + cut
                yield from whole[:cut].splitlines()
                parts, size = [whole[cut:]], len(whole) - cut
            if not data:
                yield from "".join(parts).splitlines()
                return
            data = handle.read(CHUNK)
            total += len(data)
            if total > limit:
                raise UsageProblem(too_large(f"{what} {str(path)!r}", limit))
