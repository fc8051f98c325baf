"""Strict numbers: the one parser for every integer, float, duration and version ncclprobe reads,
from the command line (through `ncclprobe.cli.types`) and from every file and environment value.

Why not Python's own: `str.isdigit()` is true for `²`, which `int()` then rejects (a crash where a
check was meant); `int()` accepts `١٢` (Arabic-Indic digits), `1_000`, and 5000-digit strings (then
fails past 4300 digits); `float()` accepts `nan` and `inf`, which compare false with every bound,
so `nan <= 0` lets a `--timeout nan` disable a watchdog, and end as a bare `NaN` in JSON. Here a
number is ASCII digits, bounded in length and value, and finite; anything else is a UsageProblem
(exit 2) naming what was read and where.

Message sizes (`64K`, `8..1G`) are parsed in `ncclprobe.sizes`, on top of these.
"""

from __future__ import annotations

import math
import re

from ncclprobe.errors import UsageProblem

MAX_INT_DIGITS = 19  # 2**63 has 19 digits: nothing ncclprobe counts needs more
INT_LIMIT = 2**63 - 1
MAX_FLOAT_CHARS = 64
MAX_DURATION_S = 7 * 24 * 3600.0  # a week: longer is a typo, not a timeout

_DIGITS = re.compile(rf"[0-9]{{1,{MAX_INT_DIGITS}}}")
_INT = re.compile(rf"[+-]?[0-9]{{1,{MAX_INT_DIGITS}}}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_VERSION = re.compile(
    r"([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,4}))?(?:[+~-][0-9A-Za-z.+~-]{0,40})?"
)
_VERSION_PREFIX = re.compile(r"^\s*([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,4}))?(?![0-9])")


def ascii_re(pattern: str) -> re.Pattern:
    """A regular expression over ASCII only, as every evidence reader compiles its patterns: `\\d`
    would also match other scripts' digits (which `int()` reads) and `\\w` letters of any script."""
    return re.compile(pattern, re.ASCII)


def is_digits(text: str) -> bool:
    """True for a non-empty run of ASCII digits (at most 19): what `str.isdigit()` is wrongly used for."""
    return isinstance(text, str) and _DIGITS.fullmatch(text) is not None


def parse_int(text: str, what: str, *, min: int | None = None, max: int | None = None) -> int:
    """`"42"` -> 42; an optional sign, ASCII digits only, within [min, max] (and |x| < 2**63)."""
    raw = text.strip() if isinstance(text, str) else text
    if not isinstance(raw, str) or _INT.fullmatch(raw) is None:
        raise UsageProblem(
            f"{what} {_shown(text)} is not a whole number (ASCII digits, at most {MAX_INT_DIGITS})"
        )
    value = int(raw)
    return check_int(value, what, min=min, max=max)


def check_int(value: int, what: str, *, min: int | None = None, max: int | None = None) -> int:
    """An integer already in hand (from JSON, say) checked against the same bounds as `parse_int`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageProblem(f"{what} {_shown(value)} is not a whole number")
    if abs(value) > INT_LIMIT:
        raise UsageProblem(f"{what} {_shown(value)} is out of range")
    _bounds(value, what, min, max, False, False)
    return value


def parse_float(
    text: str,
    what: str,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
) -> float:
    """`"0.5"`, `"1e-3"` -> a finite float within the bounds; `nan`, `inf`, `٣` and `0x10` are refused."""
    raw = text.strip() if isinstance(text, str) else text
    if not isinstance(raw, str) or len(raw) > MAX_FLOAT_CHARS or _FLOAT.fullmatch(raw) is None:
        raise UsageProblem(f"{what} {_shown(text)} is not a finite decimal number")
    return check_float(float(raw), what, min=min, max=max, min_open=min_open, max_open=max_open)


def check_float(
    value: float | int,
    what: str,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
) -> float:
    """A number already in hand (JSON, a computation) checked: a real number, finite, in range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageProblem(f"{what} {_shown(value)} is not a number")
    if isinstance(value, int) and abs(value) > INT_LIMIT:
        raise UsageProblem(f"{what} {_shown(value)} is out of range")
    value = float(value)
    if not math.isfinite(value):
        raise UsageProblem(f"{what} {value} is not a finite number")
    _bounds(value, what, min, max, min_open, max_open)
    return value


def parse_duration(
    text: str, what: str, *, min_s: float = 0.0, max_s: float = MAX_DURATION_S
) -> float:
    """Seconds: a finite number above `min_s` (exclusive: a zero timeout is no timeout) and at most `max_s`."""
    return parse_float(text, what, min=min_s, max=max_s, min_open=True)


def parse_version(text: str, what: str = "version") -> tuple[int, int, int]:
    """A whole version string as a user types it: `2.28.9`, `2.29.7+cuda12.9`, `2.18` -> (2, 18, 0).

    The whole text must be a version (`banana`, `2.28.9 and more`, `²` are refused)."""
    raw = text.strip() if isinstance(text, str) else ""
    match = _VERSION.fullmatch(raw)
    if match is None:
        raise UsageProblem(f"{what} {_shown(text)} is not a version like 2.28.9")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def version_prefix(text: str | None) -> tuple[int, int, int] | None:
    """The version a longer string starts with, as files print it (`2.28.9+cuda13.0`, `2.18.3-1`);
    None when it does not start with one. For reading evidence, where absence is not an error."""
    match = _VERSION_PREFIX.match(text or "") if isinstance(text, str) else None
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def _bounds(value, what, low, high, low_open, high_open) -> None:
    if low is not None and (value < low or (low_open and value == low)):
        raise UsageProblem(
            f"{what} must be {'above' if low_open else 'at least'} {_plain(low)}, got {_plain(value)}"
        )
    if high is not None and (value > high or (high_open and value == high)):
        raise UsageProblem(
            f"{what} must be {'below' if high_open else 'at most'} {_plain(high)}, got {_plain(value)}"
        )


def _plain(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _shown(value) -> str:
    """The offending input, quoted and cut short: a 5000-digit number is not echoed whole."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
