"""One fact about an engine, with where it was read (the row type every file of the table uses)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFact:
    name: str  # "vllm.cudagraph_mode.FULL_DECODE_ONLY"
    engine: str  # "vllm" | "sglang"
    summary: str  # the fact, in words
    source: str  # "<owner>/<repo> <path>"
    read_at: str  # the commit it was read at
    excerpt: str  # the pinned excerpt's file under tests/fixtures/engine_source/
    lines: tuple[str, ...]  # source lines (stripped) that state it, each in the excerpt
