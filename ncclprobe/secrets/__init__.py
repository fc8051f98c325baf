"""The one masking policy for every output: environments, command lines, free text, ids.

A process environment, a command line or an nccl-tests `-J` file routinely holds tokens, cloud
keys and passwords, under names no list foresees (`DB_PASS2`, `OTEL_EXPORTER_OTLP_HEADERS`) and
inside values (`Server=db;Password=...`). So masking does not depend on recognising secret names:

  - environment values are shown only for families known to hold no credentials (NCCL, CUDA,
    torch.distributed, the shell's own: `is_harmless_name`); every other value is `MASK`;
  - every value or word that is shown still goes through `mask_text`, which hides a credential by
    its context (the flag, key or header that introduces it: `--password X`, `-passin pass:X`,
    `?token=X`, `"secret": "X"`, `login user:X`, `Authorization: Bearer X`) or by its shape (URL
    userinfo, token formats, JWTs, PEM blocks, long random-looking runs); a `key=value` pair is
    masked only when its key names a credential, so `kernel.numa_balancing=0` and `opId=0x..` stay
    readable (`ncclprobe.secrets.words`); a multi-line value is masked whole (no harmless setting
    spans lines);
  - command lines (`mask_argv`) also hide the value of flags that take credentials, given with `=`
    or `:` or as the next word, repeated or chained (`--password - X`, `--api-key -- X`), inside
    `sh -c "..."` strings and setproctitle titles, and programs' own short forms (mysql's `-pX`,
    `redis-cli -a X`).

Where text leaves the process: the CLI's error line and every log line (`ncclprobe.cli`) go through
`mask_text`; readers mask what they read (`mask_provenance`, `mask_record`, `mask_env`); a setting
that names a configuration (its id, a table label) is `mask_setting`.

Every function here runs in linear time: patterns that scan a run of characters start only at the
run's first character (a look-behind) or at a quote, so no input makes them quadratic.

Use: `mask_env_value(name, value)` for one variable, `mask_env(env)` for a whole environment (an
nccl-tests `-J` file's `env`), `mask_argv(words)` for a command line, `mask_text(text)` for any
other text that may quote a user's values (log lines, error messages).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import overload

from ncclprobe.errors import UsageProblem
from ncclprobe.secrets.words import (  # noqa: F401 (MASK: every caller's one spelling of it)
    AUTH_SCHEMES,
    MASK,
    SECRET_FRAGMENTS,
    SECRET_WORDS,
    Words,
)

_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})

# Families whose values decide what NCCL, CUDA, torch.distributed, MPI and the shell do, and that
# hold no credentials by design; `mask_text` still runs over their values.
HARMLESS_PREFIXES = (
    "NCCL_",
    "RCCL_",  # ROCm's NCCL: the same family of settings (RCCL_MSCCL_ENABLE), credential words still masked
    "HIP_",  # HIP_VISIBLE_DEVICES, ROCm's CUDA_VISIBLE_DEVICES
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_",
    "TORCHELASTIC_",
    "NVSHMEM_",
    "CUDA_",
    "NVIDIA_",
    "OMP_",
    "KMP_",
    "MKL_",
    "LC_",
    "SLURM_",
    "PMI_",
    "OMPI_MCA_",
    "UCX_",
    "FI_",
)
HARMLESS_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
        "LANG",
        "LANGUAGE",
        "PWD",
        "OLDPWD",
        "HOSTNAME",
        "SHLVL",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "VLLM_NCCL_SO_PATH",
        "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY",
        "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY",
    }
)


# Free text inside a harmless family: a job's comment holds whatever its author typed (issue 29
# found credentials there); it decides nothing NCCL does, so its value is not shown.
FREE_TEXT_NAMES = frozenset({"SLURM_JOB_COMMENT", "SLURM_COMMENT", "SBATCH_COMMENT"})


@lru_cache(maxsize=4096)
def is_harmless_name(name: str) -> bool:
    """Whether a variable's value may be shown: a known family that holds no credentials, a name
    without credential words, and not free text a family lets users write anything into."""
    return (
        (name in HARMLESS_NAMES or name.startswith(HARMLESS_PREFIXES))
        and name not in FREE_TEXT_NAMES
        and not is_secret_name(name)
    )


def is_secret_name(name: str) -> bool:
    """A name made of credential words (`HF_TOKEN`, `db-password`); NCCL_IB_PKEY is not (`PKEY`)."""
    upper = name.upper()
    if upper in _NOT_SECRET_NAMES:
        return False
    words = set(re.split(r"[^A-Z0-9]+", upper))
    squashed = upper.replace("_", "").replace("-", "")
    return bool(words & SECRET_WORDS) or any(fragment in squashed for fragment in SECRET_FRAGMENTS)


@overload
def mask_env_value(name: str, value: str) -> str: ...
@overload
def mask_env_value(name: str, value: None) -> None: ...
def mask_env_value(name: str, value: str | None) -> str | None:
    """The value of variable `name` as it may be printed."""
    if value is None:
        return None
    if not is_harmless_name(name) or "\n" in value or "\r" in value:
        return MASK
    return mask_text(value)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """A whole environment (names kept, values masked), e.g. the `env` an nccl-tests `-J` file records."""
    return {str(name): mask_env_value(str(name), str(value)) for name, value in env.items()}


def mask_provenance(doc: dict) -> dict:
    """A file's record of where it came from (`env`, `argv`) masked as it is read: a results file or
    trace written by another tool, an older ncclprobe or a hand may hold what ours never writes, and
    every command that echoes a header (recommend's JSON, report, diagnose) then prints it."""
    out = dict(doc)
    if isinstance(out.get("env"), dict):
        out["env"] = mask_env(out["env"])
    if isinstance(out.get("argv"), list) and all(isinstance(word, str) for word in out["argv"]):
        out["argv"] = mask_argv(out["argv"])
    return out


# one short word without a flag, pair, URL, header or quote: nothing to find, by context or shape
_FAST = re.compile(r"[:=@\-'\"\s]")


def mask_text(text: str) -> str:
    """Free text (a log line, an error message, a value) with every credential hidden: by its
    context (`--password X`, `token=X`, `"secret": "X"`, `login user:X`, `Authorization: ...`) or
    its shape (URL userinfo, token formats, JWTs, PEM blocks, random-looking runs); the rest kept."""
    if not text or (len(text) < 15 and not _FAST.search(text) and text not in AUTH_SCHEMES):
        return text
    return Words(mask_env_value).text(text)


def mask_argv(argv: Iterable[str]) -> list[str]:
    """A command line safe to print: credential flags' values hidden (`--password X`, `-pX` after
    mysql, `redis-cli -a X`, `-passin pass:X`, inside an `sh -c "..."` string or a setproctitle
    title too), `NAME=value` words under the environment policy, every word masked by shape."""
    words = Words(mask_env_value, command=True)
    return [words.arg(word) for word in argv]


def mask_setting(name: str, value: str) -> str:
    """A setting's value where it names something (a configuration's id, a table's label): shown as
    given when the policy shows it whole, else `<masked:xxxxxxxx>`, a digest that keeps ids of
    different values distinct and the same value's id stable across runs and --resume."""
    value = str(value)
    if mask_env_value(str(name), value) == value:
        return value
    return f"<masked:{hashlib.sha256(value.encode()).hexdigest()[:8]}>"


def refuse_credential(flag: str, name: str, value: str) -> None:
    """An NCCL setting typed on the command line (`sweep --set`, `import --settings`, `recommend
    --baseline`) that the policy would not print whole: refused (exit 2), since the setting names
    results, tables and files from then on; NCCL settings hold no credentials."""
    if mask_setting(name, value) != value:
        raise UsageProblem(
            f"{flag} {name}: the value {mask_setting(name, value)} looks like a credential; NCCL "
            "settings hold none, and this one would name results, tables and files, so it is refused"
        )


def mask_record(record: dict) -> dict:
    """A results file's config record as it may be printed or copied: what each rank saw and what
    NCCL read (`proof.seen_env`, `read_by_rank`, `set_by_environment`) under the policy of the
    header's `env`; a file from an older ncclprobe or another writer may hold them raw."""
    proof = record.get("proof")
    if not isinstance(proof, dict):
        return record
    masked = dict(proof)
    for key in ("seen_env", "read_by_rank"):
        if isinstance(proof.get(key), dict):
            masked[key] = {
                rank: mask_env(env) if isinstance(env, dict) else env
                for rank, env in proof[key].items()
            }
    if isinstance(proof.get("set_by_environment"), dict):
        masked["set_by_environment"] = mask_env(proof["set_by_environment"])
    return {**record, "proof": masked}


# ---- the environment display policy: which names are shown, and how their values are ----------
# Why an allowlist: a process environment routinely holds tokens, cloud keys and passwords. By
# default only the families that decide what NCCL and torch.distributed do are shown; `--all`
# shows every name, but values only of families known to hold no credentials, and those masked by
# shape too (`mask_env_value`).

# Families whose values decide what NCCL, CUDA and torch.distributed do in a worker.
RELEVANT_PREFIXES = (
    "NCCL_",
    "RCCL_",
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_",
    "NVSHMEM_",
    "TORCHELASTIC_",
)
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


def is_relevant(name: str) -> bool:
    return name.startswith(RELEVANT_PREFIXES) or name in RELEVANT_NAMES


@overload
def display_value(name: str, value: str) -> str: ...
@overload
def display_value(name: str, value: None) -> None: ...
def display_value(name: str, value: str | None) -> str | None:
    """The value as it may be printed (`mask_env_value`): shown only for harmless families, and
    even then masked by shape (URL passwords, key=value pairs, tokens)."""
    return mask_env_value(name, value)


def visible_env(env: Mapping[str, str], show_all: bool = False) -> dict[str, str]:
    """The names that may be shown (allowlisted families, or all with --all), values masked."""
    names = sorted(name for name in env if show_all or is_relevant(name))
    return {name: display_value(name, env[name]) for name in names}
