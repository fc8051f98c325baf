"""Cleaning of captured terminal text, shared by every evidence reader.

Real captures carry decorations that are not part of what the tool printed: ANSI colour and
underline escapes (nvidia-smi underlines its header even into a pipe), mpirun's
`[1,N]<stdout>:` tags, and timestamps added by log collectors. Readers strip them here, the
same way, before matching anything.
"""

from __future__ import annotations

import re
from pathlib import Path

from ncclprobe.validate import read_text

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_MPIRUN_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
_TIMESTAMP = re.compile(
    r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def clean_line(line: str) -> str:
    """One captured line without escapes, an mpirun tag or a leading timestamp; right-stripped."""
    line = strip_ansi(line).rstrip()
    line = _MPIRUN_TAG.sub("", line)
    return _TIMESTAMP.sub("", line)


def read_text_file(path: str | Path, what: str) -> str:
    """Read a user's evidence file (UTF-8, or UTF-16/32 as Windows tools write it); unreadable,
    binary or oversized files are a UsageProblem naming the file (`ncclprobe.validate`)."""
    return read_text(path, what)
