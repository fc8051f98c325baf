"""NCCL version strings, as NCCL prints them and users write them, and releases as findings name them."""

from __future__ import annotations

from ncclprobe.numbers import version_prefix

Version = tuple[int, int, int]


def parse_version(text: str | None) -> Version | None:
    """`"2.28.9"`, `"2.29.7+cuda12.9"` -> (2, 28, 9); None when absent or unreadable (ASCII digits
    only, through `ncclprobe.numbers`, the one strict parser)."""
    return version_prefix(text)


def tagged(tag: str) -> Version:
    """The version of a release tag of NCCL's repository (`v2.28.9-1`), as this package names the
    releases it read; a tag that does not read is a mistake in the package, not in any input."""
    version = parse_version(tag.removeprefix("v"))
    if version is None:
        raise ValueError(f"not an NCCL release tag: {tag!r}")
    return version


def release(version: Version) -> str:
    """2.14 for (2, 14, 0), 2.30.7 for (2, 30, 7)."""
    return ".".join(map(str, version if version[2] else version[:2]))
