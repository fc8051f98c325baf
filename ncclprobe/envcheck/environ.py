"""Reading a process's environment from /proc, choosing what may be shown, and masking secrets.

Why an allowlist: a process environment routinely holds tokens, cloud keys and passwords. By
default only the families that decide what NCCL and torch.distributed do are shown; `--all`
shows every name, but the value of anything that looks like a secret (by its name or by the
shape of its value) is replaced by `MASKED`. Every value that leaves this package goes through
`display_value`, so no output format (table, JSON, CSV, error line) can carry a secret.

What /proc can't show: /proc/PID/environ is the block of memory the kernel filled at exec. A
process that later writes `os.environ[...]` or calls setenv() changes its own copy, not that
block; a child made by fork() without exec shows its ancestor's exec-time block.
"""

from __future__ import annotations

import re
from typing import Mapping

MASKED = "<masked>"

# Families whose values decide what NCCL, CUDA and torch.distributed do in a worker.
RELEVANT_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "NVSHMEM_", "TORCHELASTIC_")
RELEVANT_NAMES = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "LD_PRELOAD", "LD_LIBRARY_PATH",  # decide which libnccl gets loaded
    "VLLM_NCCL_SO_PATH", "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY",
    "OMP_NUM_THREADS",
})

# Name words that mark a secret. Matching whole `_`-separated words keeps NCCL_IB_PKEY visible.
_SECRET_WORDS = frozenset({
    "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "KEY", "KEYS",
    "APIKEY", "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "AUTHORIZATION", "COOKIE", "SESSION",
    "PRIVATE", "SIGNATURE", "PAT", "DSN", "CERT", "JWT", "BEARER", "WEBHOOK", "PWD",
})
# Names that contain a secret word but are well known not to hold one (the shell's working directories).
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
_SECRET_FRAGMENTS = ("SECRET", "TOKEN", "PASSW", "CREDENTIAL", "APIKEY", "ACCESSKEY", "PRIVATEKEY")
# Value shapes of well-known credentials, and URLs carrying a password.
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|gh[opsur]_[A-Za-z0-9]{20,}"
    r"|github_pat_\w{20,}|sk-[A-Za-z0-9_-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[\w-]{16,}"
    r"|-----BEGIN|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}|://[^/\s:@]*:[^/\s@]+@)")  # redis://:pw@ too
_RANDOM_LOOKING = re.compile(r"^[A-Za-z0-9+/=_\-]{32,}$")


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


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper in _NOT_SECRET_NAMES:
        return False
    words = set(re.split(r"[^A-Z0-9]+", upper))
    squashed = upper.replace("_", "")
    return bool(words & _SECRET_WORDS) or any(fragment in squashed for fragment in _SECRET_FRAGMENTS)


def looks_secret_value(value: str) -> bool:
    if _SECRET_VALUE.search(value):
        return True
    return bool(_RANDOM_LOOKING.match(value)) and _mixed_classes(value)


def _mixed_classes(value: str) -> bool:
    return any(c.islower() for c in value) and any(c.isupper() for c in value) and any(c.isdigit() for c in value)


def display_value(name: str, value: str | None) -> str | None:
    """The value as it may be printed: secrets (by name or by shape) become MASKED."""
    if value is None:
        return None
    if is_secret_name(name) or looks_secret_value(value):
        return MASKED
    return value


def mask_argv(argv: list[str]) -> list[str]:
    """A command line safe to print: `--hf-token X`, `--password=X` and token-shaped words masked."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        flag, sep, value = word.partition("=")
        if hide_next:
            out.append(MASKED)
            hide_next = False
        elif sep and is_secret_name(flag.lstrip("-")):  # --password=X, and `env HF_TOKEN=X cmd`
            out.append(f"{flag}={MASKED}")
        elif word.startswith("-") and not sep and is_secret_name(word.lstrip("-")):
            out.append(word)
            hide_next = True
        else:
            out.append(MASKED if looks_secret_value(word) else word)
    return out


def visible_env(env: Mapping[str, str], show_all: bool = False) -> dict[str, str]:
    """The names that may be shown (allowlisted families, or all with --all), values masked."""
    names = sorted(name for name in env if show_all or is_relevant(name))
    return {name: display_value(name, env[name]) for name in names}


def env_diff(parent: Mapping[str, str], child: Mapping[str, str], show_all: bool = False) -> dict[str, dict]:
    """What a child's environment adds, removes or changes relative to its parent's, masked.

    Returns {name: {"parent": value|None, "child": value|None}} for the names that may be shown.
    """
    names = sorted(set(parent) | set(child))
    diff = {}
    for name in names:
        if not (show_all or is_relevant(name)) or parent.get(name) == child.get(name):
            continue
        diff[name] = {"parent": display_value(name, parent.get(name)),
                      "child": display_value(name, child.get(name))}
    return diff
