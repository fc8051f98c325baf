"""The environment a captured job runs with: the user's own, plus what switches the evidence on.

Nothing of the user's command changes; only these variables are added (each in the manifest, and
any value of the user's that one replaces, masked):
- NCCL's debug log, one file per process under `nccl/` (`nccl.recipes.USER_LOG_NAME`: NCCL fills in
  host and pid) at the proof level of `nccl.recipes.proof_env`: INFO with INIT and ENV, which log
  what NCCL read (`set by environment`), its version, the transports and channels it chose, once per
  communicator; the per-call TUNING lines only with `tuning` (a long job's calls would flood it);
- PyTorch's Flight Recorder, dumped into `fr/` on NCCL's watchdog timeout
  (`nccl.recipes.flight_recorder_env`), in the one spelling the job's torch reads (`job_torch`: the
  torch version the job's own interpreter finds; the other spelling would make every rank print a
  deprecation warning; where the interpreter cannot be told, the newer names, and the in-job module
  adds the older ones in a process whose torch is older: `fr_respell`);
- each engine's own profiler directory (`engine-profiles/`): SGLang's SGLANG_TORCH_PROFILER_DIR,
  vLLM's VLLM_TORCH_PROFILER_DIR with shapes and stacks (`ENGINE_PROFILER_ENV`, read from source);
- the in-job module: the generated `sitecustomize.py` first on PYTHONPATH (`capture.hook`);
- PYTHONUNBUFFERED=1: the job's output reaches the capture as it is printed (its pipes are not a
  terminal, where Python would buffer), so the log's order and the progress watch are right.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.engine_facts.profiler import PROFILER_ENV
from ncclprobe.evidence.live import capture_dir as D
from ncclprobe.nccl.recipes import (
    FR_NAMES,
    FR_NAMES_FROM,
    USER_LOG_NAME,
    flight_recorder_env,
    proof_env,
)
from ncclprobe.secrets import display_value, is_relevant

# Read in the engines' sources (they cannot run on the CPU machine): engine_facts.profiler
ENGINE_PROFILER_ENV = PROFILER_ENV

# Set per worker by launchers (torchrun, vLLM, SGLang): a worker's own value is no lost setting
PER_WORKER = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)


@dataclass
class JobEnvironment:
    env: dict[str, str]  # what the job is started with
    added: dict[str, str]  # what the capture set
    replaced: dict[str, str]  # the user's values it replaced
    settings: dict[str, str] = field(default_factory=dict)  # the user's own settings, to follow

    def masked(self, values: Mapping[str, str]) -> dict[str, str]:
        return {k: display_value(k, v) or "" for k, v in sorted(values.items())}


def user_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The settings of the user's shell that every worker should receive: NCCL, torch.distributed,
    NVSHMEM and the CUDA variables the display policy knows, not the per-worker ones."""
    return {
        k: v
        for k, v in env.items()
        if is_relevant(k) and k not in PER_WORKER and not k.startswith("TORCHELASTIC_")
    }


TORCH_VERSION_S = 30.0  # the job's interpreter asked for its torch's version: at most this long
_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})")


def job_python(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The Python interpreter the job starts: the command itself (`python3 ...`), or the one a
    script's `#!` line names (`torchrun`, `vllm`: a console script); None for anything else."""
    if not argv:
        return None
    program = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
    if os.path.basename(program).startswith("python"):
        return program
    try:
        with open(program, "rb") as handle:
            first = handle.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    if not words or not os.path.basename(words[0]).startswith("python"):
        return None
    return shutil.which(words[0], path=env.get("PATH")) or words[0]


def job_torch(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, int] | None:
    """(major, minor) of the torch the job's interpreter imports (its installed metadata, read
    without importing torch); else this capture's own torch's where the job runs this interpreter;
    None where neither is known."""
    python = job_python(argv, env)
    if python is None:
        return None
    code = "import importlib.metadata as m; print(m.version('torch'))"
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        from importlib import metadata

        try:
            return _major_minor(metadata.version("torch"))
        except metadata.PackageNotFoundError:
            return None
    try:
        done = subprocess.run(
            [python, "-c", code],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=TORCH_VERSION_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _major_minor(done.stdout.strip()) if done.returncode == 0 else None


def fr_respell() -> dict:
    """The in-job module's orders where `job_torch` was not known: the newer Flight Recorder names
    are set; a process whose torch is older than FR_NAMES_FROM adds the older ones itself."""
    new, old = FR_NAMES["new"], FR_NAMES["old"]
    return {"below": list(FR_NAMES_FROM), "names": dict(zip(new, old, strict=True))}


def _major_minor(version: str) -> tuple[int, int] | None:
    found = _VERSION.match(version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def job_environment(
    base: Mapping[str, str],
    directory: Path,
    hook_dir: Path,
    *,
    tuning: bool = False,
    torch_version: tuple[int, int] | None = None,
) -> JobEnvironment:
    """`torch_version`: the job's torch (`job_torch`), whose Flight Recorder names are set; None:
    the newer names (a job whose interpreter is not known is most likely on a recent torch)."""
    added = {
        **proof_env(tuning=tuning),
        "NCCL_DEBUG_FILE": str(directory / D.NCCL_LOGS / USER_LOG_NAME),
        **flight_recorder_env(
            directory / D.FLIGHT_RECORDER / D.FR_PREFIX, torch_version or FR_NAMES_FROM
        ),
        **{k: v.format(dir=directory / D.ENGINE_PROFILES) for k, v in ENGINE_PROFILER_ENV.items()},
        "PYTHONPATH": os.pathsep.join(
            [str(hook_dir)] + ([base["PYTHONPATH"]] if base.get("PYTHONPATH") else [])
        ),
        "PYTHONUNBUFFERED": "1",
    }
    replaced = {
        k: base[k]
        for k in added
        if k in base and base[k] != added[k] and k != "PYTHONPATH"  # PYTHONPATH is extended
    }
    return JobEnvironment(
        env={**base, **added},
        added=added,
        replaced=replaced,
        settings=user_settings({k: v for k, v in base.items() if k not in added}),
    )
