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
