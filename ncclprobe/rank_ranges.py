"""Sets of ranks written as ranges: "0-84, 86-255", never 255 numbers one by one.

One home for how every output names several ranks, so a 1,024-rank job reads in one line wherever
a rank set is printed (hang findings, headers, notes, the ranks' NCCL logs, the sweep's proof).
"""

from __future__ import annotations

from collections.abc import Iterable


def spans(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, de-duplicated ranks as (first, last) runs of consecutive numbers."""
    out: list[tuple[int, int]] = []
    for rank in sorted(set(ranks)):
        if out and rank == out[-1][1] + 1:
            out[-1] = (out[-1][0], rank)
        else:
            out.append((rank, rank))
    return out


def ranges_text(ranks: Iterable[int], *, limit: int = 12) -> str:
    """`0-84, 86-255`; a pair of neighbours stays `4, 5`; past `limit` runs the rest is counted
    (`0, 2, 4, ... and 120 more ranks`) so one line stays one line."""
    runs = spans(ranks)
    parts = [f"{a}" if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}" for a, b in runs]
    if len(parts) <= limit:
        return ", ".join(parts)
    rest = sum(b - a + 1 for a, b in runs[limit:])
    return ", ".join(parts[:limit]) + f", ... and {rest} more"


def rank_word(ranks: Iterable[int], *, limit: int = 12) -> str:
    """`rank 3` or `ranks 0-84, 86-255` (with the count when it is not plain: `(255 ranks)`)."""
    ranks = sorted(set(ranks))
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    text = f"ranks {ranges_text(ranks, limit=limit)}"
    return text + (f" ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def parse_ranges(text: str) -> list[int]:
    """The inverse of `ranges_text` without a cut: `0-2, 5` -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        a = int(first)
        b = int(last) if sep else a
        if b < a:
            raise ValueError(f"range {part!r} runs backwards")
        out.extend(range(a, b + 1))
    return out
