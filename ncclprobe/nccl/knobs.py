"""The NCCL knowledge table: one row per NCCL variable that matters for collectives on a node,
and the questions every other module asks of it.

Every command that needs to know something about an NCCL variable reads it here: the sweep
planner (which variables force a new worker process), value validation (`ncclprobe.nccl.values`),
the lint (`ncclprobe.nccl.lint`), `ncclprobe knobs`, env-check and the recommender. The rows are
written in `knobs_datapath` (protocols, algorithms, transports, buffers, channels) and
`knobs_tooling` (cache, debug log, files, launch mode, tuner plugins), the row type `Knob` and
`Scope` (when NCCL reads a variable) in `knob_row`. Each row's facts were read in NCCL's source
(github.com/NVIDIA/nccl) at the release tags in `checked_at`; `source` names the function and
file, `verified` what NCCL's own log showed on real hardware.

`proof_scope` is where NCCL's log proves the read, which is what the sweep is planned around.
"""

from __future__ import annotations

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl import knobs_datapath, knobs_tooling
from ncclprobe.nccl.knob_row import Knob, Scope

KNOBS: dict[str, Knob] = {k.name: k for k in (*knobs_datapath.ROWS, *knobs_tooling.ROWS)}


def proof_scope(name: str) -> Scope:
    """Where NCCL's log proves a read: at each communicator creation, or once per process. What the
    sweep plans its pools around (a value logged only once needs a process of its own)."""
    row = KNOBS.get(name)
    if row is None or row.logged_once:
        return Scope.PROCESS
    return row.scope


# What a single rank never uses, so NCCL never reads (or never needs) it there: the tuning model
# (NCCL_PROTO, NCCL_ALGO: no TUNING line and no `set by environment` line with one rank, seen on the
# H200 with NCCL 2.28.9) and the transports between peers (P2P, SHM, the network's GPU Direct).
# Not NCCL_CUMEM_ENABLE: every communicator reads it, one rank included (fillInfo, src/init.cc),
# and it decides how NCCL allocates its own buffers.
NEEDS_PEERS = (
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_NET_GDR_LEVEL",
)


# What the ranks of one job set to different values by design, so a difference between their logs
# is no finding: each rank's own log file, and each rank's host id when ranks share a GPU
# (`nccl.recipes` SHARE_GPU_RANK_ENV).
DIFFERS_PER_RANK = ("NCCL_DEBUG_FILE", "NCCL_HOSTID")


def acts_on_one_rank(name: str) -> bool:
    """Whether a variable can change anything in a communicator of one rank."""
    return name not in NEEDS_PEERS


def scope_of(name: str) -> Scope:
    """Unknown NCCL variables are treated as once per process: the safe assumption for planning."""
    row = KNOBS.get(name)
    return row.scope if row else Scope.PROCESS


NO_CACHE_SINCE = (2, 29, 7)


def effective_scope(name: str, env: dict, version: tuple[int, int, int] | None) -> Scope:
    """`scope_of`, unless NCCL_NO_CACHE in `env` lifts the variable's once-per-process cache: then NCCL
    re-reads it at every use (2.29.7+; names compared exactly, ALL for every NCCL_PARAM). An unknown
    version keeps the cached answer: the safe one for planning."""
    row = KNOBS.get(name)
    if row is None or not row.nccl_param or version is None or version < NO_CACHE_SINCE:
        return scope_of(name)
    listed = {token for token in env.get("NCCL_NO_CACHE", "").split(",") if token}
    return Scope.COMMUNICATOR if "ALL" in listed or name in listed else row.scope


def explain(name: str) -> dict:
    """One row as a JSON-able explanation, for `ncclprobe knobs VAR` and the lint's messages."""
    row = KNOBS.get(name)
    if row is None:
        raise UsageProblem(
            f"{name!r} is not in the knowledge table; known: {', '.join(sorted(KNOBS))}"
        )
    when = (
        "at every communicator creation: a new communicator in the same process sees a new value"
        if row.scope is Scope.COMMUNICATOR
        else "once per process and cached: another value needs a new process"
    )
    if row.logged_once:
        when += ", but NCCL logs the read only the first time"
    if row.nccl_param:
        when += " (NCCL 2.29.7+: NCCL_NO_CACHE can make it re-read at every use)"
    return {
        "name": row.name,
        "summary": row.summary,
        "read": row.scope.value,
        "read_when": when,
        "kind": row.kind.value,
        "values": list(row.values),
        "case_sensitive": row.case_sensitive,
        "default": row.default,
        "syntax": row.syntax,
        "since": row.since or None,
        "version_notes": list(row.version_notes),
        "risks": list(row.risks),
        "log_proof": row.log_proof,
        "source": row.source,
        "checked_at": list(row.checked_at),
        "verified": list(row.verified),
        "unverified": list(row.unverified),
        **row.extra,
    }
