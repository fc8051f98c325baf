"""Host names as Slurm writes them: `node[01-04,07],login1`, expanded and compressed.

One home for how several hosts are named, read (`--hosts`, SLURM_JOB_NODELIST) and printed: a
setting that differs on 3 of 512 hosts reads in one line (`gpu[017,233,410]`), never 512 names.
The syntax is Slurm's hostlist (`scontrol show hostnames`): a bracket holds comma-separated numbers
and ranges, whose zero padding is kept; several brackets in one name multiply out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import is_digits

MAX_HOSTS = 65536  # a hostlist that expands past this is a typo, not a cluster
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")  # what a host name (or an address) is made of
_TAIL_NUMBER = re.compile(r"^(.*?)([0-9]+)$")


def expand(text: str, what: str = "--hosts") -> list[str]:
    """`node[01-03],gpu7` -> node01 node02 node03 gpu7, in the order written, duplicates refused."""
    names: list[str] = []
    for item in _split_top(text, what):
        names.extend(_expand_one(item, what))
        if len(names) > MAX_HOSTS:
            raise UsageProblem(f"{what}: more than {MAX_HOSTS} hosts in {text!r}")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UsageProblem(f"{what}: host {name!r} is named twice")
        seen.add(name)
    if not names:
        raise UsageProblem(f"{what}: no host in {text!r}")
    return names


def _split_top(text: str, what: str) -> list[str]:
    """Split at commas outside brackets."""
    items, depth, current = [], 0, ""
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise UsageProblem(f"{what}: unbalanced ']' in {text!r}")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise UsageProblem(f"{what}: unbalanced '[' in {text!r}")
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def _expand_one(item: str, what: str) -> list[str]:
    head, bracket, rest = item.partition("[")
    if not bracket:
        if not _NAME.fullmatch(item):
            raise UsageProblem(f"{what}: {item!r} is not a host name")
        return [item]
    inside, _, tail = rest.partition("]")
    numbers = [number for part in inside.split(",") for number in _range(part, item, what)]
    return [name for number in numbers for name in _expand_one(head + number + tail, what)]


def _range(part: str, item: str, what: str) -> list[str]:
    first, dash, last = part.strip().partition("-")
    if not is_digits(first) or (dash and not is_digits(last)):
        raise UsageProblem(f"{what}: {part!r} in {item!r} is not a number or a range A-B")
    if not dash:
        return [first]
    low, high = int(first), int(last)
    if high < low:
        raise UsageProblem(f"{what}: the range {part!r} in {item!r} runs backwards")
    if high - low >= MAX_HOSTS:
        raise UsageProblem(f"{what}: the range {part!r} in {item!r} is larger than {MAX_HOSTS}")
    width = len(first) if first.startswith("0") else 0
    return [str(n).zfill(width) for n in range(low, high + 1)]


def compress(names: Iterable[str], *, limit: int = 8) -> str:
    """The hostlist of `names`: `node[01-03,07],login1`, sorted; past `limit` groups the rest is
    counted (`..., and 40 more hosts`) so one line stays one line."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    numbered: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        match = _TAIL_NUMBER.match(name)
        if match is None:
            plain.append(name)
        else:
            numbered.setdefault(match.group(1), []).append(match.group(2))
    for prefix, all_digits in numbered.items():
        padded = any(d.startswith("0") and len(d) > 1 for d in all_digits)
        for digits in all_digits:  # padded names group by width (n001..n599), others as numbers
            width = len(digits) if padded else 0
            groups.setdefault((prefix, width), []).append(int(digits))
    parts = [(name, 1, 0) for name in plain]
    for (prefix, width), numbers in groups.items():
        parts.append(_group(prefix, width, sorted(numbers), limit))
    parts.sort()
    rest = sum(left for _, _, left in parts[:limit]) + sum(
        shown + left for _, shown, left in parts[limit:]
    )
    text = ",".join(part for part, _, _ in parts[:limit])
    return text + (f", and {rest} more host(s)" if rest else "")


def _group(prefix: str, width: int, numbers: list[int], limit: int) -> tuple[str, int, int]:
    """(`prefix[01-03,07]`, the hosts it shows, those left out past `limit` runs)."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    left = sum(b - a + 1 for a, b in runs[limit:])
    runs = runs[:limit]
    shown = sum(b - a + 1 for a, b in runs)
    if len(runs) == 1 and runs[0][0] == runs[0][1]:
        return f"{prefix}{str(runs[0][0]).zfill(width)}", shown, left
    pad = lambda n: str(n).zfill(width)  # noqa: E731
    inside = ",".join(pad(a) if a == b else f"{pad(a)}-{pad(b)}" for a, b in runs)
    return f"{prefix}[{inside}]", shown, left
