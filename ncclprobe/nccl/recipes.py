"""How ncclprobe runs NCCL: the recipes every launcher of NCCL workers follows.

Proof. NCCL prints `<VAR> set by environment to <value>` (ENV subsystem) when it reads a variable
and, with TUNING, one line per collective call naming the algorithm and protocol it chose; both
are INFO lines. So every NCCL worker ncclprobe starts gets NCCL_DEBUG=INFO, the INIT,ENV[,TUNING]
subsystems and a log file of its own: `nccl-rank<R>.log` in a directory that belongs to that
launch (NCCL opens the file for writing, so two processes must never share one). The parent and
the worker itself find a rank's log with `rank_log`. These variables are ncclprobe's own while it
runs NCCL: a user's value would hide the proof, so they are never swept.

--share-gpu. NCCL refuses two ranks on one GPU ("Duplicate GPU detected") unless they seem to be on
different hosts, so each rank gets its own NCCL_HOSTID; they then talk over NET/Socket, where the
P2P and SHM variables have nothing to act on. NVLS needs several GPUs on one NVLink fabric, which
ranks on one GPU never are: it stays off (the recorded H200 runs of this mode had it off too).
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe import envvars
from ncclprobe.errors import UsageProblem

PROOF_VARIABLES = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
LOG_DIR_VAR = envvars.NCCL_LOG_DIR  # tells a worker where ncclprobe asked NCCL to write its log
RANK_LOG = "nccl-rank{rank}.log"

# NVLink multicast (NVLS) off: what the probes measure needs none, and on shared hosts it can take GPUs down
NO_NVLS = {"NCCL_NVLS_ENABLE": "0"}

SHARE_GPU_MIN_RANKS = 2
SHARE_GPU_ENV = NO_NVLS
SHARE_GPU_RANK_ENV = {
    "NCCL_HOSTID": "ncclprobe-share-gpu-rank{rank}"
}  # "{rank}": PoolSpec.rank_env
NOT_WITH_SHARED_GPU = {
    "NCCL_P2P_LEVEL": "ranks sharing one GPU talk over NET/Socket, never P2P",
    "NCCL_P2P_DISABLE": "ranks sharing one GPU talk over NET/Socket, never P2P",
    "NCCL_SHM_DISABLE": "ranks sharing one GPU talk over NET/Socket, never SHM",
    "NCCL_HOSTID": "ncclprobe sets a distinct NCCL_HOSTID per rank to share the GPU",
}

# the protocol x algorithm grid of `sweep` and `run-engine --tuned` ("default" leaves it unset)
DEFAULT_GRID = {
    "NCCL_PROTO": ("default", "LL", "LL128", "Simple"),
    "NCCL_ALGO": ("default", "Ring", "Tree"),
}


def proof_env(*, tuning: bool = True, also: tuple[str, ...] = ()) -> dict[str, str]:
    """NCCL_DEBUG and NCCL_DEBUG_SUBSYS, the same for every rank. `tuning=False` leaves out the
    per-call TUNING lines, for long runs whose thousands of calls would only fill the log; `also`
    adds subsystems (GRAPH for the rings and trees NCCL searched)."""
    subsystems = ("INIT", "ENV") + (("TUNING",) if tuning else ()) + tuple(also)
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": ",".join(subsystems)}


# A user's own job (not ncclprobe's workers): one NCCL log per process, named by host and pid
USER_LOG_NAME = "nccl.%h.%p.log"


def user_log_env(directory: str | Path) -> dict[str, str]:
    """NCCL_DEBUG=INFO and a log per process in `directory`: what a next command asks a user's job
    to set (NCCL fills in %h and %p)."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": f"{directory}/{USER_LOG_NAME}"}


# PyTorch's Flight Recorder, so that a hung job leaves every rank's dump. Read in PyTorch's source:
# torch/csrc/distributed/c10d/FlightRecorderDetail.hpp reads {"TORCH_FR_BUFFER_SIZE",
# "TORCH_NCCL_TRACE_BUFFER_SIZE"} (the recent source defaults to 2000 entries, older releases to 0,
# off: so it is always set), FlightRecorder.cpp's DebugInfoWriter the dump prefix
# {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} (file = prefix + rank), and
# ProcessGroupNCCL dumps on its watchdog's timeout with TORCH_NCCL_DUMP_ON_TIMEOUT=1 (the other
# ranks on the first one's signal through the store). gloo records into the same recorder but has no
# dump on timeout (ProcessGroupGloo.cpp: record_pg_ranks and records, no dump path).
# The names: torch read only TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE until
# pytorch/pytorch#152563 (merged 2025-05-07, after torch 2.7's branch cut) made the recorder vendor
# neutral and its follow-ups named the variables TORCH_FR_*; c10d's getCvar* reads a list of names
# and warns once per process for every later (deprecated) name that is set: "... is deprecated; use
# TORCH_FR_BUFFER_SIZE instead" (in torch 2.13's libtorch_cpu.so). So only one spelling is set, the
# one the job's torch reads: the TORCH_FR_* names from FR_NAMES_FROM on; below it the older ones
# (torch 2.8 may read both: a wrong "new only" would switch the recorder off in silence, a wrong
# "old only" costs one warning, so 2.8 keeps the older spelling).
FR_BUFFER_ENTRIES = 2000
FR_NAMES_FROM = (2, 9)
FR_NAMES = {
    "new": ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"),
    "old": ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
}


def fr_spelling(torch_version: tuple[int, int] | None) -> str:
    """ "new" or "old": the Flight Recorder variables' names that torch `torch_version` reads without
    a deprecation warning; None (not known): "both" (a command printed for any torch)."""
    if torch_version is None:
        return "both"
    return "new" if torch_version >= FR_NAMES_FROM else "old"


def flight_recorder_env(
    prefix: str | Path, torch_version: tuple[int, int] | None = None
) -> dict[str, str]:
    """Flight Recorder on, dumped on NCCL's watchdog timeout to `prefix` + rank, in the names
    `torch_version` reads (both spellings where it is not known)."""
    spelling = fr_spelling(torch_version)
    spellings = ("new", "old") if spelling == "both" else (spelling,)
    env = {}
    for name in spellings:
        size, dump = FR_NAMES[name]
        env[size] = str(FR_BUFFER_ENTRIES)
        env[dump] = str(prefix)
    env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    return env


def rank_log_env(directory: str | Path, rank: int | None = None) -> dict[str, str]:
    """NCCL_DEBUG_FILE for a rank's own log in `directory`, and where the worker finds it. Without
    `rank` the file name keeps `{rank}`, which the launcher fills in (PoolSpec.rank_env)."""
    name = RANK_LOG if rank is None else RANK_LOG.format(rank=rank)
    return {"NCCL_DEBUG_FILE": str(Path(directory) / name), LOG_DIR_VAR: str(directory)}


def rank_log(directory: str | Path, rank: int | str) -> Path:
    return Path(directory) / RANK_LOG.format(rank=rank)


def own_log(rank: int) -> Path | None:
    """In a worker: the log ncclprobe asked NCCL to write for this rank; None when it asked for none."""
    directory = envvars.get(LOG_DIR_VAR)
    return rank_log(directory, rank) if directory else None


def only_shapes_the_log(name: str) -> bool:
    """NCCL_DEBUG and its NCCL_DEBUG_* companions change what NCCL logs, never what it does."""
    return name == "NCCL_DEBUG" or name.startswith("NCCL_DEBUG_")


def check_share_gpu_ranks(nranks: int) -> None:
    if nranks < SHARE_GPU_MIN_RANKS:
        raise UsageProblem(
            f"--share-gpu needs at least {SHARE_GPU_MIN_RANKS} ranks (NCCL tunes nothing for one), "
            f"got {nranks}"
        )


def share_gpu_env(swept=()) -> dict[str, str]:
    """The fixed variables of --share-gpu, minus any a grid sweeps (the grid decides those)."""
    return {k: v for k, v in SHARE_GPU_ENV.items() if k not in swept}
