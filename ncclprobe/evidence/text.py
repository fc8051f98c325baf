"""Cleaning of captured terminal text, shared by every evidence reader.

Real captures carry decorations that are not part of what the tool printed: ANSI colour and
underline escapes (nvidia-smi underlines its header even into a pipe), mpirun's
`[1,N]<stdout>:` tags, srun's `N: ` task labels, and timestamps added by log collectors. Readers strip them here, the
same way, before matching anything.
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe.numbers import ascii_re
from ncclprobe.validate import read_text

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
