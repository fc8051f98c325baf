"""Reading a process's environment from /proc, choosing what may be shown, and masking secrets.

Why an allowlist: a process environment routinely holds tokens, cloud keys and passwords. By
default only the families that decide what NCCL and torch.distributed do are shown; `--all`
shows every name, but values only of families known to hold no credentials, and those masked by
shape too (`ncclprobe.secrets`). Every value that leaves this package goes through
`display_value`, so no output format (table, JSON, CSV, error line) can carry a secret.

What /proc can't show: /proc/PID/environ is the block of memory the kernel filled at exec. A
process that later writes `os.environ[...]` or calls setenv() changes its own copy, not that
block; a child made by fork() without exec shows its ancestor's exec-time block.
"""

from __future__ import annotations

from collections.abc import Mapping

from ncclprobe.secrets import MASK as MASKED
from ncclprobe.secrets import mask_argv, mask_env_value

__all__ = [
    "MASKED",
    "EnvironUnreadable",
    "display_value",
    "env_diff",
    "is_relevant",
    "mask_argv",
    "parse_environ_block",
    "read_environ",
    "visible_env",
]

# Families whose values decide what NCCL, CUDA and torch.distributed do in a worker.
RELEVANT_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "NVSHMEM_", "TORCHELASTIC_")
RELEVANT_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_DEVICE_ORDER",
        "CUDA_MODULE_LOADING",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",  # decide which libnccl gets loaded
        "VLLM_NCCL_SO_PATH",
        "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY",
        "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY",
        "OMP_NUM_THREADS",
    }
)


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


def is_relevant(name: str) -> bool:
    return name.startswith(RELEVANT_PREFIXES) or name in RELEVANT_NAMES


def display_value(name: str, value: str | None) -> str | None:
    """The value as it may be printed (`ncclprobe.secrets`): shown only for harmless families, and
    even then masked by shape (URL passwords, key=value pairs, tokens)."""
    return mask_env_value(name, value)


def visible_env(env: Mapping[str, str], show_all: bool = False) -> dict[str, str]:
    """The names that may be shown (allowlisted families, or all with --all), values masked."""
    names = sorted(name for name in env if show_all or is_relevant(name))
    return {name: display_value(name, env[name]) for name in names}


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
