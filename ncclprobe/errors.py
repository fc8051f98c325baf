"""Typed errors at the library's boundaries; the CLI maps each to its exit code.

Library code raises these with a full sentence naming the bad value; it never prints or exits.
"""

from __future__ import annotations


class NcclprobeError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code = 4


class UsageProblem(NcclprobeError, ValueError):
    """Bad input from the user: malformed sizes, unknown names, unreadable files (exit 2)."""

    exit_code = 2


class Unsupported(NcclprobeError):
    """Nothing can be measured or read here: no GPU for a GPU-only probe, nothing readable (exit 3)."""

    exit_code = 3


def require_extra(module: str, extra: str, what: str) -> None:
    """Unsupported (exit 3: not available in this install, though the input is fine) when an optional
    dependency is missing, naming the extra that brings it; called before any work starts."""
    from importlib.util import find_spec

    if find_spec(module) is None:
        raise Unsupported(
            f"{what} needs {module}, which is not installed here: pip install 'ncclprobe[{extra}]'"
        )
