"""ncclprobe's own environment variables, in one registry (as vLLM's envs.py): name, type, default and
what each does, and who sets it.

Most are how the launcher (`ncclprobe.launch`, or the torchrun commands of `sweep --torchrun-dir`)
tells a worker process its job; five are the user's (the cache, the worker threads, two input limits
and the raw path's issue loop); four plant faults for the test suite. Every read goes through `get`,
so no variable is read under a name this table does not hold (`tests/test_envvars.py` fails on a
`NCCLPROBE_` name read anywhere else or missing here), and README's table is
`python -m ncclprobe.envvars` (the test checks it is current).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

USER, LAUNCHER, TEST = "user", "launcher", "test suite"  # who sets the variable


@dataclass(frozen=True)
class Variable:
    name: str
    type: str  # what the value is: int, path, a module:function ...
    default: str  # what holds when it is unset, in words
    doc: str  # what it does, one line
    set_by: str  # USER, LAUNCHER or TEST


CACHE_DIR = "NCCLPROBE_CACHE_DIR"
WORKER_THREADS = "NCCLPROBE_WORKER_THREADS"
MAX_INPUT_MIB = "NCCLPROBE_MAX_INPUT_MIB"
MAX_PROFILE_EVENTS = "NCCLPROBE_MAX_PROFILE_EVENTS"
ISSUE_LOOP = "NCCLPROBE_ISSUE_LOOP"
# NCCLPROBE_ISSUE_LOOP's values (ncclprobe.probes.issue_loop says what each does)
ISSUE_LOOP_CHOICES = ("auto", "c", "ctypes")
ENTRY = "NCCLPROBE_ENTRY"
RUN_DIR = "NCCLPROBE_RUN_DIR"
BACKEND = "NCCLPROBE_BACKEND"
STORE_PORT = "NCCLPROBE_STORE_PORT"
GPU = "NCCLPROBE_GPU"
PARENT_PID = "NCCLPROBE_PARENT_PID"
NCCL_LOG_DIR = "NCCLPROBE_NCCL_LOG_DIR"
JOB_AGENT = "NCCLPROBE_JOB_AGENT"
TEST_HANG_CONFIG = "NCCLPROBE_TEST_HANG_CONFIG"
TEST_CRASH_CONFIG = "NCCLPROBE_TEST_CRASH_CONFIG"
TEST_WRONG_CONFIG = "NCCLPROBE_TEST_WRONG_CONFIG"
TEST_REFUSE_CASE = "NCCLPROBE_TEST_REFUSE_CASE"

VARIABLES = (
    Variable(
        CACHE_DIR,
        "path",
        "$XDG_CACHE_HOME/ncclprobe, else ~/.cache/ncclprobe",
        "where GGUF checkpoints are kept once converted (run-engine, train-draft --checkpoint FILE.gguf)",
        USER,
    ),
    Variable(
        WORKER_THREADS,
        "int >= 1",
        "the cores this process may use, shared among the host's ranks",
        "torch threads per worker rank",
        USER,
    ),
    Variable(
        MAX_INPUT_MIB,
        "int >= 1",
        "each reader's own limit (1024 for logs and profiles)",
        "raises the most MiB ncclprobe reads of one input file, decompressed (a larger file or gzip "
        "stream is refused)",
        USER,
    ),
    Variable(
        MAX_PROFILE_EVENTS,
        "int >= 1",
        "3000000",
        "the most events ncclprobe reads of one profiler trace (more are refused)",
        USER,
    ),
    Variable(
        ISSUE_LOOP,
        f"{', '.join(ISSUE_LOOP_CHOICES[:-1])} or {ISSUE_LOOP_CHOICES[-1]} (any case)",
        "auto: the C loop where it was built at install, else ctypes",
        "what issues the raw path's calls: `c` the C loop (refused where it is not built), "
        "`ctypes` a Python loop (about 0.6 µs more per call); any other value is refused",
        USER,
    ),
    Variable(ENTRY, "module:function", "required", "what a worker runs", LAUNCHER),
    Variable(
        RUN_DIR,
        "path",
        "none: no payload, no message file",
        "the pool's directory: `payload.json` in, one `rank<R>.jsonl` of messages out per rank",
        LAUNCHER,
    ),
    Variable(
        BACKEND,
        "nccl | gloo",
        "nccl with a GPU, else gloo",
        "the worker's torch.distributed backend",
        LAUNCHER,
    ),
    Variable(
        STORE_PORT,
        "int",
        "none: torchrun's env:// rendezvous",
        "the port of the TCPStore the launcher hosts",
        LAUNCHER,
    ),
    Variable(GPU, "int", "LOCAL_RANK", "the CUDA device of the rank", LAUNCHER),
    Variable(
        PARENT_PID,
        "int",
        "none: the worker outlives a killed launcher",
        "the launcher's pid: the worker dies with it (Linux)",
        LAUNCHER,
    ),
    Variable(
        NCCL_LOG_DIR,
        "path",
        "none: ncclprobe asked NCCL for no log",
        "where ncclprobe asked NCCL to write each rank's log (NCCL_DEBUG_FILE)",
        LAUNCHER,
    ),
    Variable(
        JOB_AGENT,
        "1",
        "none: a process of the user's job",
        "marks ncclprobe's own per-node processes of a run across hosts (env-check --launcher), "
        "which are never taken for the job's",
        LAUNCHER,
    ),
    Variable(
        TEST_HANG_CONFIG, "config id", "none", "rank 1 sleeps forever in that configuration", TEST
    ),
    Variable(
        TEST_CRASH_CONFIG,
        "config id",
        "none",
        "rank 1 exits with status 3 in that configuration",
        TEST,
    ),
    Variable(
        TEST_WRONG_CONFIG,
        "config id",
        "none",
        "one rank perturbs its correctness input in that configuration",
        TEST,
    ),
    Variable(
        TEST_REFUSE_CASE,
        "collective",
        "none",
        "rank 1 raises where that collective is measured",
        TEST,
    ),
)
BY_NAME = {variable.name: variable for variable in VARIABLES}


def get(
    name: str, environ: Mapping[str, str] | None = None, *, default=None, required: bool = False
):
    """The value of one of ncclprobe's variables as set (a string), `default` when unset; `required`
    raises KeyError instead, as `os.environ[name]` does. A name not in the registry is a bug."""
    if name not in BY_NAME:
        raise KeyError(f"{name} is not one of ncclprobe's variables (ncclprobe.envvars.VARIABLES)")
    environ = os.environ if environ is None else environ
    return environ[name] if required else environ.get(name, default)


def table() -> str:
    """README's table of the variables (Markdown)."""
    lines = ["| variable | set by | value | unset | what it does |", "|---|---|---|---|---|"]
    lines += [f"| `{v.name}` | {v.set_by} | {v.type} | {v.default} | {v.doc} |" for v in VARIABLES]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(table() + "\n")
