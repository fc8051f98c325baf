"""NCCL version strings, as NCCL prints them and users write them."""

from __future__ import annotations

import re

Version = tuple[int, int, int]


def parse_version(text: str | None) -> Version | None:
    """`"2.28.9"`, `"2.29.7+cuda12.9"` -> (2, 28, 9); None when absent or unreadable."""
    match = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)
