"""The names NCCL and ncclprobe give algorithms, protocols and collectives: one row each, and every
spelling of it derived from the row, never written again elsewhere (tests/test_nccl_one_home.py).

An algorithm or protocol has NCCL's own name (`COLLNET_DIRECT`, `SIMPLE`: the NCCL_ALGO_* macros,
what TUNING lines print from 2.24 on and what kernel names carry, `ncclDevKernel_AllReduce_Sum_f32_
RING_LL`), the token NCCL_ALGO / NCCL_PROTO take (`CollnetDirect`, `Simple`, matched without case:
`parseList` in src/graph/tuning.cc), its index in NCCL's enum (src/include/nccl_common.h: the number
2.20-2.23 print in TUNING lines) and the tuner plugin CSV's spelling (`collnet_direct`: NCCL's name
in lower case). The Func/Proto/Algo matrix (2.24+) prints `CollNetDirect`: the same name without
underscores, which `canonical` reads. Rows are in the order NCCL's documentation lists the tokens.

A collective has ncclprobe's name (records, `--collective`: `all_reduce`, `alltoall`), NCCL's
function name (`AllReduce`, `AlltoAll`: TUNING lines, kernels, nccl-tests' testColl) and, for the
five NCCL tunes, the lower-case function token NCCL_ALGO's `func:list` form and the tuner take.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Algorithm:
    name: str  # NCCL's own, upper case: log lines, kernel names
    token: str  # NCCL_ALGO's spelling, as ncclAlgoStr (src/init.cc) spells it
    code: int | None  # index in NCCL's enum since 2.14 (2.20-2.23 TUNING lines print it)
    since: tuple[int, int, int] | None = None  # the release that introduced it, when after 2.13
    until: tuple[int, int, int] | None = None  # the first release that no longer knows it

    @property
    def tuner(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Protocol:
    name: str
    token: str  # NCCL_PROTO's spelling
    code: int

    @property
    def tuner(self) -> str:
        return self.name.lower()


# ncclAlgoStr at v2.13.4-1 Tree, Ring, CollNet; v2.14.3-1 CollNet split into CollNetDirect and
# CollNetChain (parseList compares whole tokens: `CollNet` is unknown from 2.14); v2.17.1-1 NVLS;
# v2.18.1-1 NVLSTree; v2.23.4-1 PAT. Versions are compared as NCCL numbers them: a change that came
# with the first release of a series (v2.14.3-1 is the first 2.14) is pinned at x.y.0.
ALGORITHMS = (
    Algorithm("RING", "Ring", 1),
    Algorithm("TREE", "Tree", 0),
    Algorithm("COLLNET", "CollNet", None, until=(2, 14, 0)),
    Algorithm("COLLNET_DIRECT", "CollNetDirect", 2, (2, 14, 0)),
    Algorithm("COLLNET_CHAIN", "CollNetChain", 3, (2, 14, 0)),
    Algorithm("NVLS", "NVLS", 4, (2, 17, 0)),
    Algorithm("NVLS_TREE", "NVLSTree", 5, (2, 18, 0)),
    Algorithm("PAT", "PAT", 6, (2, 23, 0)),
)
CURRENT = tuple(a for a in ALGORITHMS if a.code is not None)  # those of 2.14 on
PROTOCOLS = (
    Protocol("LL", "LL", 0),
    Protocol("LL128", "LL128", 1),
    Protocol("SIMPLE", "Simple", 2),
)

ALGORITHM_TOKENS = tuple(a.token for a in ALGORITHMS)  # every token some release accepts
PROTOCOL_TOKENS = tuple(p.token for p in PROTOCOLS)
# by enum index: a 2.20-2.23 TUNING line's number is the index into these
ALGORITHM_NAMES = tuple(a.name for a in sorted(CURRENT, key=lambda a: a.code or 0))  # all set
PROTOCOL_NAMES = tuple(p.name for p in sorted(PROTOCOLS, key=lambda p: p.code))
# a kernel name holds one of them between underscores; NVLS_TREE holds NVLS and TREE too, so the
# longer names are tried first
ALGORITHMS_TO_MATCH = tuple(sorted(ALGORITHM_NAMES, key=len, reverse=True))
PROTOCOLS_TO_MATCH = tuple(sorted(PROTOCOL_NAMES, key=len, reverse=True))
# NCCL_ALGO token (lower case) -> the release that introduced it
ALGORITHM_SINCE = {a.token.lower(): a.since for a in ALGORITHMS if a.since}
# NCCL_ALGO token (lower case) -> the first release that no longer accepts it
ALGORITHM_UNTIL = {a.token.lower(): a.until for a in ALGORITHMS if a.until}
TUNER_ALGORITHMS = {a.token.lower(): a.tuner for a in CURRENT}
TUNER_PROTOCOLS = {p.token.lower(): p.tuner for p in PROTOCOLS}

_CANONICAL = {n.replace("_", "").lower(): n for n in ALGORITHM_NAMES + PROTOCOL_NAMES}


def canonical(spelling: str) -> str | None:
    """NCCL's name of an algorithm or protocol however it is written (`CollNetDirect`,
    `collnet_direct`, `Simple`); None for anything else."""
    return _CANONICAL.get(spelling.replace("_", "").lower())


@dataclass(frozen=True)
class CollectiveName:
    name: str  # ncclprobe's: records, --collective, the probes' registry
    function: str  # NCCL's: TUNING lines, kernel names, nccl-tests' testColl name
    tuned: bool = True  # NCCL_ALGO/NCCL_PROTO and the tuner address it by `token`

    @property
    def token(self) -> str:
        return self.function.lower()


# in NCCL's ncclFunc order (Broadcast, Reduce, AllGather, ReduceScatter, AllReduce); NCCL runs
# all-to-all and send/receive as grouped point-to-point operations, which it does not tune
COLLECTIVE_NAMES = (
    CollectiveName("broadcast", "Broadcast"),
    CollectiveName("reduce", "Reduce"),
    CollectiveName("all_gather", "AllGather"),
    CollectiveName("reduce_scatter", "ReduceScatter"),
    CollectiveName("all_reduce", "AllReduce"),
    CollectiveName("alltoall", "AlltoAll", tuned=False),
    CollectiveName("sendrecv", "SendRecv", tuned=False),
)
COLLECTIVE = {c.name: c for c in COLLECTIVE_NAMES}
# function names that kernels spell otherwise (RCCL's all-to-all kernel is `AllToAll`)
OTHER_FUNCTION_SPELLINGS = {"AllToAll": "alltoall"}
TUNED_FUNCTIONS = tuple(c.token for c in COLLECTIVE_NAMES if c.tuned)  # NCCL_ALGO's `func:` names
TUNER_COLLECTIVES = {c.name: c.token for c in COLLECTIVE_NAMES if c.tuned}


def nccl_function(name: str) -> str:
    """NCCL's function name of one of ncclprobe's collectives: `all_reduce` -> `AllReduce`."""
    return COLLECTIVE[name].function


# The algorithms each tuned function can run at all (ncclTopoTuneModel's `continue`s, src/graph/tuning.cc,
# the same at v2.23.4-1, v2.24.3-1 and v2.28.9-1): broadcast and reduce only Ring; all-gather and
# reduce-scatter Ring, PAT, NVLS and CollNetDirect; all-reduce every algorithm but PAT. A list that
# leaves a function none of its own fails that function's call on 2.24+, falls back to Ring before.
FUNCTION_ALGORITHMS = {
    "broadcast": frozenset({"ring"}),
    "reduce": frozenset({"ring"}),
    "allgather": frozenset({"ring", "pat", "nvls", "collnetdirect"}),
    "reducescatter": frozenset({"ring", "pat", "nvls", "collnetdirect"}),
    "allreduce": frozenset({"ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree"}),
}
