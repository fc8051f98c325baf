"""Reading a process's environment from /proc, and what a child's adds to its parent's.

What may be shown of an environment (the allowlist `is_relevant`, `display_value`, `visible_env`)
is the display policy of `ncclprobe.secrets`; every value that leaves this package goes through
`display_value`, so no output format (table, JSON, CSV, error line) can carry a secret.

What /proc can't show: /proc/PID/environ is the block of memory the kernel filled at exec. A
process that later writes `os.environ[...]` or calls setenv() changes its own copy, not that
block; a child made by fork() without exec shows its ancestor's exec-time block.
"""

from __future__ import annotations

from collections.abc import Mapping

from ncclprobe.secrets import display_value, is_relevant


class EnvironUnreadable(Exception):
    """The environment exists but can't be read here (another user, or the process is gone)."""


def read_environ(pid: int) -> dict[str, str]:
    """The environment `pid` was exec'd with, from /proc/PID/environ (NUL-separated)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except PermissionError as exc:
        raise EnvironUnreadable("permission denied (needs the same user or root)") from exc
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise EnvironUnreadable("the process exited") from exc
    return parse_environ_block(raw)


def parse_environ_block(raw: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            env[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def env_diff(
    parent: Mapping[str, str], child: Mapping[str, str], show_all: bool = False
) -> dict[str, dict]:
    """What a child's environment adds, removes or changes relative to its parent's, masked.

    Returns {name: {"parent": value|None, "child": value|None}} for the names that may be shown.
    """
    names = sorted(set(parent) | set(child))
    diff = {}
    for name in names:
        if not (show_all or is_relevant(name)) or parent.get(name) == child.get(name):
            continue
        diff[name] = {
            "parent": display_value(name, parent.get(name)),
            "child": display_value(name, child.get(name)),
        }
    return diff
