"""Message sizes: parse `8..1G` (doubling), `4K,64K,1M`, `1M..16M:4` (factor 4); print them short.

Suffixes are binary (K = 1024), as in nccl-tests' -b/-e. Every size is a positive whole number of
bytes written in ASCII digits, at most MAX_SIZE (256 TiB); anything else is a UsageProblem naming the
bad token. The digits go through `ncclprobe.numbers`, the one strict number parser.
"""

from __future__ import annotations

import math
import re

from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import MAX_INT_DIGITS, parse_int

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MAX_SIZE = 1 << 48
MAX_SIZES = 4096  # sizes in one list: a range to 1T by a factor of 2 has 41
_SIZE_RE = re.compile(rf"^\s*([0-9]{{1,{MAX_INT_DIGITS}}})\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(token: str) -> int:
    """`'64K'` -> 65536. Rejects negatives, fractions, zero, non-ASCII digits, unknown suffixes and
    sizes above MAX_SIZE."""
    match = _SIZE_RE.match(token) if isinstance(token, str) else None
    if not match:
        shown = token if len(str(token)) <= 40 else str(token)[:37] + "..."
        raise UsageProblem(
            f"bad size {shown!r}: expected a positive integer with an optional K/M/G suffix, like 64K"
        )
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value <= 0:
        raise UsageProblem(f"bad size {token!r}: sizes must be positive")
    if value > MAX_SIZE:
        raise UsageProblem(f"bad size {token.strip()!r}: larger than {format_size(MAX_SIZE)} bytes")
    return value


def parse_sizes(spec: str) -> list[int]:
    """A comma list of sizes and ranges (`lo..hi` doubling, `lo..hi:f` multiplying by f), sorted, unique."""
    if not spec or not spec.strip():
        raise UsageProblem("empty size list: give sizes like 8..1G or 4K,64K,1M")
    sizes: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if ".." in part:
            sizes.update(_parse_range(part))
        else:
            sizes.add(parse_size(part))
        if len(sizes) > MAX_SIZES:
            raise UsageProblem(f"size list {spec[:40]!r}... has more than {MAX_SIZES} sizes")
    return sorted(sizes)


def _parse_range(part: str) -> list[int]:
    body, _, factor_text = part.partition(":")
    lo_text, _, hi_text = body.partition("..")
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if hi < lo:
        raise UsageProblem(
            f"bad size range {part!r}: the maximum {hi_text.strip()} is below the minimum {lo_text.strip()}"
        )
    factor = 2
    if factor_text:
        try:
            factor = parse_int(factor_text, "step factor", min=2, max=MAX_SIZE)
        except UsageProblem:
            raise UsageProblem(
                f"bad size range {part!r}: the step factor must be an integer of at least 2"
            ) from None
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


def exact_size(nbytes: int) -> str:
    """A size as `parse_size` reads it back to the same byte: the largest suffix that divides it
    (9216 -> '9K'), else plain bytes (2304 -> '2304', where format_size says '2.25K')."""
    for unit in ("T", "G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(int(nbytes))


def format_size(nbytes: int | float) -> str:
    """65536 -> '64K', 1536 -> '1.5K', 7 -> '7B'; past 1024T in powers of ten (a 400-digit count
    from a file is no size, but printing it must not crash: '1e+399B'), NaN/inf as Python says."""
    if isinstance(nbytes, float) and not math.isfinite(nbytes):
        return f"{nbytes}B"
    if nbytes >= 1 << 60:
        if isinstance(nbytes, int) and nbytes.bit_length() > 1000:  # beyond a float
            return f"2^{nbytes.bit_length() - 1}+B"
        return f"{float(nbytes):.3g}B"
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{int(nbytes)}B"
