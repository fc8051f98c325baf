"""Message sizes: parse `8..1G` (doubling), `4K,64K,1M`, `1M..16M:4` (factor 4); print them short.

Suffixes are binary (K = 1024), as in nccl-tests' -b/-e. Every size is a positive whole number of
bytes; anything else is a UsageProblem naming the bad token.
"""

from __future__ import annotations

import re

from ncclprobe.errors import UsageProblem

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(token: str) -> int:
    """`'64K'` -> 65536. Rejects negatives, fractions, zero and unknown suffixes."""
    match = _SIZE_RE.match(token)
    if not match:
        raise UsageProblem(f"bad size {token!r}: expected a positive integer with an optional K/M/G suffix, like 64K")
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value <= 0:
        raise UsageProblem(f"bad size {token!r}: sizes must be positive")
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
    return sorted(sizes)


def _parse_range(part: str) -> list[int]:
    body, _, factor_text = part.partition(":")
    lo_text, _, hi_text = body.partition("..")
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if hi < lo:
        raise UsageProblem(f"bad size range {part!r}: the maximum {hi_text.strip()} is below the minimum {lo_text.strip()}")
    factor = 2
    if factor_text:
        if not factor_text.strip().isdigit() or int(factor_text) < 2:
            raise UsageProblem(f"bad size range {part!r}: the step factor must be an integer of at least 2")
        factor = int(factor_text)
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


def format_size(nbytes: int | float) -> str:
    """65536 -> '64K', 1536 -> '1.5K', 7 -> '7B'."""
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{int(nbytes)}B"
