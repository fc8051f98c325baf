"""The NCCL knowledge table: one row per NCCL variable that matters for collectives on a node.

Every command that needs to know something about an NCCL variable reads it here: the sweep
planner (which variables force a new worker process), value validation (`ncclprobe.nccl.values`),
the lint (`ncclprobe.nccl.lint`), `ncclprobe knobs`, env-check and the recommender. Each row's
facts were read in NCCL's source (github.com/NVIDIA/nccl) at the release tags in `checked_at`;
`source` names the function and file, `verified` what NCCL's own log showed on real hardware.

Scope is when NCCL reads the variable:
  COMMUNICATOR  at every communicator creation (ncclGetEnv in the init path): a worker can set it
                in its own environment and build a new communicator to try another value;
  PROCESS       once, cached for the life of the process (NCCL_PARAM's static cache,
                ncclTopoUserP2pLevel, ncclDebugInit): another value needs a new process.
`proof_scope` is where NCCL's log proves the read, which is what the sweep is planned around.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.names import ALGORITHM_TOKENS, PROTOCOL_TOKENS
from ncclprobe.nccl.p2p import (
    LEGACY_P2P_LEVELS,
    P2P_LEVEL_SINCE,
    P2P_LEVELS,
    P2P_LEVELS_UNDOCUMENTED,
)


class Scope(str, Enum):
    COMMUNICATOR = "communicator"
    PROCESS = "process"


class Kind(str, Enum):
    TOKENS = "tokens"  # comma list of names, optional ^ exclusion, optional func:list forms
    LEVEL = "level"  # one path-type name (case-sensitive) or a legacy integer
    INT = "int"
    BOOL = "bool"  # 0 or 1
    CHOICE = "choice"  # one of `values`
    PATH = "path"
    TEXT = "text"


@dataclass(frozen=True, kw_only=True)
class Knob:
    name: str
    scope: Scope
    kind: Kind
    summary: str
    values: tuple[str, ...] = ()  # canonical spellings; for TOKENS the allowed tokens
    case_sensitive: bool = False  # True: a wrong-case value is silently ignored by NCCL
    default: str = "unset"  # what NCCL does when the variable is unset
    syntax: str = ""  # how values are written (exclusion, per-collective forms)
    version_notes: tuple[str, ...] = ()  # behaviour that changed between NCCL versions
    risks: tuple[str, ...] = ()  # what can go wrong when it is set
    log_proof: str = ""  # how NCCL's debug log shows it was read
    source: str = ""  # where the fact comes from
    since: str = ""  # NCCL version that introduced it, when later than 2.8
    unverified: tuple[str, ...] = ()  # facts read from NCCL's source, not yet seen on hardware
    verified: tuple[str, ...] = ()  # facts seen in NCCL's own log on real hardware, and where
    checked_at: tuple[str, ...] = ()  # NCCL release tags whose source these facts were read at
    nccl_param: bool = False  # read through NCCL_PARAM's cache (NCCL_NO_CACHE lifts it, 2.29.7+)
    logged_once: bool = (
        False  # re-read per communicator, but `set by environment` only the first time
    )
    minimum: int | None = None  # INT: the range NCCL uses the value in, and its step
    maximum: int | None = None
    multiple_of: int = 1
    extra: dict = field(default_factory=dict)


DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
DEBUG_SUBSYSTEMS = (
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "ALLOC_HOST",
    "DESTROY",
    "ALL",
)
# subsystems ncclDebugInit (src/debug.cc) knows only from a release on; older ones ignore the name
DEBUG_SUBSYSTEM_SINCE = {
    "BOOTSTRAP": (2, 21, 0),
    "REG": (2, 21, 0),
    "PROFILE": (2, 22, 0),
    "RAS": (2, 24, 0),
    "DESTROY": (2, 30, 0),
    "ALLOC_HOST": (2, 30, 7),
}

_PARAM = (
    "NCCL_PARAM static cache (src/include/param.h), read and logged by ncclLoadParam "
    "(src/misc/param.cc): once per process"
)
_PARAM_TAGS = ("v2.21.5-1", "v2.28.9-1", "v2.29.7-1")
_H200 = "NCCL 2.28.9, H200, two ranks on one GPU over NET/Socket, 2026-11-29"

KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            name="NCCL_PROTO",
            scope=Scope.COMMUNICATOR,
            kind=Kind.TOKENS,
            values=PROTOCOL_TOKENS,
            summary="Protocols NCCL may use: LL (low latency), LL128, Simple (bandwidth).",
            default="NCCL's cost model picks per size; LL128 only where NCCL's own rule allows it (every hop "
            "in the node NVLink, the network hop within PXB or PXN, GPUs alike, a verified architecture: "
            "`ncclprobe.nccl.ll128`)",
            syntax="comma list, case-insensitive, no spaces (each token is compared whole); ^ prefix "
            "excludes (^LL128); 2.24+: `;`-separated "
            "per-collective forms like `^LL128;allreduce:LL128` (only the first clause may lack a function)",
            version_notes=(
                "2.24+: an unknown token is a WARN and ncclInvalidUsage; 2.23 and older ignore it silently",
                "2.24+: per-collective `func:list` forms",
                "2.24+: a list that leaves a collective no protocol it can run fails that collective's call "
                "(`no algorithm/protocol available`, ncclInvalidUsage), not communicator creation; 2.23 "
                "and older fall back to Ring",
            ),
            risks=(
                "LL128 forced where NCCL keeps it off (a PCIe hop, GPUs of different types, an architecture NCCL "
                "has not verified) can corrupt data silently (NVIDIA/nccl#786, #831)",
                "^LL (or any ^ list without LL128) force-enables LL128, bypassing NCCL's safety check",
            ),
            log_proof="`NCCL_PROTO set by environment to <value>` (ENV subsystem, no trailing period); 2.24+ rank 0 "
            "also prints `Enabled NCCL Func/Proto/Algo Matrix:`",
            source="ncclGetEnv and parseList in ncclTopoTuneModel, src/graph/tuning.cc; ncclProtoStr, "
            "src/init.cc; topoGetAlgoInfo, src/enqueue.cc",
            checked_at=("v2.23.4-1", "v2.24.3-1", "v2.28.9-1"),
            verified=(
                _H200
                + ": ^LL gives matrix LL 0 / LL128 1 / Simple 1 and NCCL then picks RING/LL128 for "
                "1K and 64K on a path without NVLink (tests/fixtures/nccl_logs/*proto_excl_ll_tuning.log)",
                _H200
                + ": an unknown token is `WARN Unrecognized element token` and communicator creation fails",
                "NCCL 2.28.9 H200, one rank: no `NCCL_PROTO set by environment` line although NCCL_PROTO=LL "
                "was set (the one-rank log in tests/fixtures): one-rank communicators cannot prove it",
            ),
        ),
        Knob(
            name="NCCL_ALGO",
            scope=Scope.COMMUNICATOR,
            kind=Kind.TOKENS,
            values=ALGORITHM_TOKENS,
            summary="Algorithms NCCL may use for collectives (Ring, Tree, NVLS, ...).",
            default="NCCL's cost model picks per size",
            syntax="comma list, case-insensitive, no spaces; ^ excludes; 2.24+ per-collective "
            "`allreduce:tree;broadcast:ring`",
            version_notes=(
                "CollNet before 2.14 only; CollNetDirect and CollNetChain 2.14+, NVLS 2.17+, NVLSTree 2.18+, "
                "PAT 2.23+",
                "2.24+: an unknown token fails communicator creation (`Unrecognized element token`); 2.23 "
                "and older ignore it silently",
                "2.24+: a list that leaves a collective no algorithm it can run (NCCL_ALGO=Tree: broadcast "
                "runs only Ring) fails that collective's call (`no algorithm/protocol available`, "
                "ncclInvalidUsage), not communicator creation; 2.23 and older fall back to Ring",
            ),
            risks=(
                "forcing Tree on one node rarely helps; on 2.24+ a list without Ring makes every "
                "collective that can run only Ring (broadcast, reduce) fail at its call",
            ),
            log_proof="`NCCL_ALGO set by environment to <value>`; per call, TUNING lines `... -> Algo RING proto ...`",
            verified=(
                _H200
                + ": `Ring,Bogus` is `WARN Unrecognized element token` and communicator creation fails",
            ),
            source="ncclGetEnv and parseList in ncclTopoTuneModel, src/graph/tuning.cc; ncclAlgoStr, "
            "src/init.cc; topoGetAlgoInfo, src/enqueue.cc",
            checked_at=(
                "v2.13.4-1",
                "v2.14.3-1",
                "v2.17.1-1",
                "v2.18.1-1",
                "v2.23.4-1",
                "v2.24.3-1",
                "v2.28.9-1",
            ),
        ),
        Knob(
            name="NCCL_P2P_LEVEL",
            scope=Scope.PROCESS,
            kind=Kind.LEVEL,
            values=P2P_LEVELS,
            case_sensitive=True,
            summary="Furthest topology path over which GPUs talk peer-to-peer (else SHM or NET).",
            default="2.23+: PXB (SYS for AMD CPUs with 2 GPUs or fewer); 2.22 and older: SYS (PXB on Intel, "
            "Zhaoxin and ARM CPUs)",
            syntax="one of LOC NVL PIX PXB PHB SYS, exact upper case (strcmp); also NVB and PXN, C2C (2.26+), P2C "
            "(2.27+); a value starting with a digit is a legacy level, 0-5 = LOC PIX PXB PHB SYS SYS (strtol)",
            version_notes=(
                "the default changed in 2.23: P2P no longer crosses CPU host bridges (PHB/SYS use SHM)",
                "level names NCCL knows: C2C from 2.26, P2C from 2.27; older versions ignore them silently",
            ),
            risks=(
                "a lowercase value is silently ignored",
                "P2P over PHB/SYS behind PCIe ACS can hang or corrupt data",
            ),
            log_proof="`NCCL_P2P_LEVEL set by environment to <LEVEL>` (normalised name: 2 logs PXB); not printed when "
            "NCCL_P2P_DISABLE=1, which wins",
            source="ncclGetLevel -> process-global ncclTopoUserP2pLevel, src/graph/paths.cc; topoPathTypeStr, "
            "src/graph/topo.cc",
            checked_at=(
                "v2.21.5-1",
                "v2.22.3-1",
                "v2.23.4-1",
                "v2.25.1-1",
                "v2.26.2-1",
                "v2.26.6-1",
                "v2.27.3-1",
                "v2.28.9-1",
                "v2.30.7-1",
            ),
            extra={
                "undocumented_levels": P2P_LEVELS_UNDOCUMENTED,
                "level_since": {k: ".".join(map(str, v)) for k, v in P2P_LEVEL_SINCE.items()},
                "legacy_integers": {str(i): name for i, name in enumerate(LEGACY_P2P_LEVELS)},
            },
            verified=(
                _H200
                + ": `sys` prints no set-by-environment line and no WARN while `SYS` does; `2` is "
                "logged as PXB (tests/fixtures/nccl_logs/*p2p_level_lowercase.log)",
            ),
            unverified=(
                "the lowercase value's effect on P2P itself needs two GPUs on one host to observe",
            ),
        ),
        Knob(
            name="NCCL_P2P_DISABLE",
            scope=Scope.PROCESS,
            kind=Kind.BOOL,
            values=("0", "1"),
            summary="1 turns peer-to-peer off entirely (same as P2P level LOC).",
            default="0",
            risks=("overrides NCCL_P2P_LEVEL: setting both is contradictory",),
            log_proof="2.23+: `NCCL_P2P_DISABLE set by environment to 1` (only for 1); 2.22 and older log "
            "`NCCL_P2P_LEVEL set by environment to LOC` instead",
            version_notes=(
                "2.23+: its own `set by environment` line; before, it showed as NCCL_P2P_LEVEL=LOC",
            ),
            source="ncclGetLevel(..., NCCL_P2P_DISABLE, NCCL_P2P_LEVEL), src/graph/paths.cc",
            checked_at=("v2.21.5-1", "v2.22.3-1", "v2.23.4-1", "v2.28.9-1"),
        ),
        Knob(
            name="NCCL_SHM_DISABLE",
            scope=Scope.PROCESS,
            kind=Kind.BOOL,
            values=("0", "1"),
            nccl_param=True,
            summary="1 disables the shared-memory transport (then NET/sockets carry non-P2P pairs).",
            default="0",
            log_proof="`NCCL_SHM_DISABLE set by environment to 1.`",
            source=_PARAM + ", src/transport/shm.cc",
            checked_at=_PARAM_TAGS,
        ),
        Knob(
            name="NCCL_BUFFSIZE",
            scope=Scope.PROCESS,
            kind=Kind.INT,
            nccl_param=True,
            summary="Simple-protocol buffer per channel and peer, in bytes.",
            default="4194304 (4 MiB)",
            syntax="an integer in bytes (strtoll base 0: 0x400000 works, `4M` is read as 4)",
            risks=("large values multiply GPU memory by channels x peers",),
            log_proof="`NCCL_BUFFSIZE set by environment to N.`",
            source=_PARAM + ", src/init.cc",
            checked_at=_PARAM_TAGS,
        ),
        Knob(
            name="NCCL_NTHREADS",
            scope=Scope.PROCESS,
            kind=Kind.INT,
            nccl_param=True,
            minimum=64,
            maximum=512,
            multiple_of=32,
            summary="CUDA threads per NCCL block (Simple and LL).",
            default="256 or 512 by link speed",
            syntax="a multiple of 32 from 64 to 512 (documented: 64, 128, 256, 512); NCCL replaces anything else: "
            "not a multiple of 32 or above 512 by 512, below 64 by 64 (`Invalid NCCL_NTHREADS ...`: a WARN "
            "before 2.27, an INFO line of GRAPH|ENV from 2.27)",
            version_notes=(
                "2.27+: the `Invalid NCCL_NTHREADS` line is INFO (GRAPH|ENV); a WARN before",
            ),
            log_proof="`NCCL_NTHREADS set by environment to N.`",
            source=_PARAM + "; getNthreads, src/graph/tuning.cc; limits: src/include/device.h "
            "(src/include/devcomm.h before 2.19)",
            checked_at=(
                "v2.12.12-1",
                "v2.18.5-1",
                "v2.21.5-1",
                "v2.26.6-1",
                "v2.27.3-1",
                "v2.28.9-1",
                "v2.30.7-1",
            ),
        ),
        Knob(
            name="NCCL_MIN_NCHANNELS",
            scope=Scope.PROCESS,
            kind=Kind.INT,
            nccl_param=True,
            summary="Lower bound on channels (deprecated in 2.17 for NCCL_MIN_CTAS).",
            log_proof="`NCCL_MIN_NCHANNELS set by environment to N.`",
            source=_PARAM + ", src/graph/connect.cc; deprecation: docs/userguide/source/env.rst",
            checked_at=(*_PARAM_TAGS, "v2.30.7-1"),
        ),
        Knob(
            name="NCCL_MAX_NCHANNELS",
            scope=Scope.PROCESS,
            kind=Kind.INT,
            nccl_param=True,
            summary="Upper bound on channels (deprecated in 2.17 for NCCL_MAX_CTAS).",
            log_proof="`NCCL_MAX_NCHANNELS set by environment to N.`",
            source=_PARAM + ", src/graph/connect.cc; deprecation: docs/userguide/source/env.rst",
            checked_at=(*_PARAM_TAGS, "v2.30.7-1"),
        ),
        Knob(
            name="NCCL_MIN_CTAS",
            scope=Scope.PROCESS,
            kind=Kind.INT,
            nccl_param=True,
            summary="Lower bound on CTAs (channels); overrides ncclConfig_t.minCTAs.",
            since="2.17",
            source=_PARAM + "; envConfigOverride, src/init.cc",
            checked_at=("v2.17.1-1", "v2.28.9-1"),
        ),
        Knob(
            name="NCCL_MAX_CTAS",
            scope=Scope.PROCESS,
            kind=Kind.INT,
            nccl_param=True,
            summary="Upper bound on CTAs (channels); overrides ncclConfig_t.maxCTAs.",
            since="2.17",
            source=_PARAM + "; envConfigOverride, src/init.cc",
            checked_at=("v2.17.1-1", "v2.28.9-1"),
        ),
        Knob(
            name="NCCL_NVLS_ENABLE",
            scope=Scope.PROCESS,
            kind=Kind.CHOICE,
            values=("0", "1", "2"),
            nccl_param=True,
            summary="NVLink SHARP (multicast) algorithms; needs NVSwitch and Hopper or newer.",
            default="2 (auto)",
            risks=("NVLink multicast on shared hosts can take GPUs down: keep 0 there",),
            source=_PARAM + ", src/transport/nvls.cc",
            checked_at=_PARAM_TAGS,
        ),
        Knob(
            name="NCCL_CUMEM_ENABLE",
            scope=Scope.PROCESS,
            kind=Kind.BOOL,
            values=("0", "1"),
            nccl_param=True,
            summary="Use the cuMem* virtual memory API for buffers (P2P/CUMEM instead of P2P/IPC).",
            default="auto since 2.19 (on where the driver supports cuMem); 0 (off) before",
            log_proof="transport lines read `via P2P/CUMEM` when on, `via P2P/IPC` when off",
            source=_PARAM + ", src/misc/cudawrap.cc; read by every communicator, one rank included "
            "(fillInfo, src/init.cc); transport lines, src/transport/p2p.cc",
            checked_at=("v2.18.6-1", "v2.19.1-1", *_PARAM_TAGS),
        ),
        Knob(
            name="NCCL_LL128_C2C",
            scope=Scope.PROCESS,
            kind=Kind.BOOL,
            values=("0", "1"),
            nccl_param=True,
            since="2.27.3",
            summary="Whether NCCL's own LL128 rule keeps LL128 on over a network hop beyond PXB (P2C, PXN) "
            "on sm90 and newer.",
            default="1",
            version_notes=(
                "2.27.3: 1 lets sm90+ keep LL128 over a network hop up to P2C, 0 up to PXN",
                "2.27.5+: 1 lets sm90+ keep LL128 up to PXN (P2C included), 0 only up to PXB",
            ),
            log_proof="`NCCL_LL128_C2C set by environment to N.`; 2.27.5+ with 0 on sm90+: GRAPH `Disabling "
            "LL128 over all PxN connections (PXB and C2C)...`",
            source=_PARAM + "; NCCL_PARAM(Ll128C2c) in ncclTopoTuneModel, src/graph/tuning.cc",
            checked_at=("v2.27.3-1", "v2.27.5-1", "v2.28.9-1", "v2.30.7-1"),
        ),
        Knob(
            name="NCCL_NO_CACHE",
            scope=Scope.PROCESS,
            kind=Kind.TEXT,
            since="2.29.7",
            summary="Variables NCCL re-reads at every use instead of caching once per process (or ALL).",
            syntax="comma list of full names (NCCL_BUFFSIZE, exact case) or ALL; lifts only NCCL_PARAM caches: "
            "NCCL_P2P_LEVEL, NCCL_P2P_DISABLE and NCCL_DEBUG* stay once per process",
            version_notes=("2.29.7+; older versions ignore it",),
            risks=(
                "a listed variable set after the first communicator is no longer too late: it takes effect at "
                "its next use, so `set after init` findings and once-per-process reasoning no longer hold",
            ),
            log_proof="`Disabling caching for environment variable NCCL_X.` (ENV; `PARAM: Disabling caching "
            "...` from 2.30), then a `set by environment` line at every read",
            source="ncclGetEnvNoCacheOnce (std::call_once) and ncclLoadParam, src/misc/param.cc (2.29), "
            "src/param/param.cc (2.30)",
            checked_at=("v2.29.3-1", "v2.29.7-1", "v2.30.7-1"),
        ),
        Knob(
            name="NCCL_DEBUG",
            scope=Scope.PROCESS,
            kind=Kind.CHOICE,
            values=DEBUG_LEVELS,
            summary="Log level: VERSION, WARN, INFO, ABORT, TRACE (case-insensitive).",
            default="none",
            syntax="one level name, any case (strcasecmp); TRACE needs a debug build of NCCL for most lines",
            version_notes=(
                "2.22+: the version banner is an INFO line of every process; before, rank 0 printed it bare",
            ),
            source="ncclDebugInit (strcasecmp), src/debug.cc: runs once per process; showVersion, src/init.cc",
            checked_at=("v2.21.5-1", "v2.22.3-1", "v2.28.9-1"),
        ),
        Knob(
            name="NCCL_DEBUG_SUBSYS",
            scope=Scope.PROCESS,
            kind=Kind.TOKENS,
            values=DEBUG_SUBSYSTEMS,
            summary="Which subsystems log; setting it replaces the default list.",
            default="INIT,ENV (2.22 and older), INIT,BOOTSTRAP,ENV (2.23+)",
            syntax="comma list of subsystem names, any case; ^ prefix excludes the listed ones from ALL",
            risks=(
                "a list without ENV hides every `set by environment` line, the proof that a setting was read",
            ),
            version_notes=(
                "2.20+: TUNING per-call lines are INFO (TRACE before); 2.24+ they name the algorithm",
                "names known from: BOOTSTRAP and REG 2.21, PROFILE 2.22, RAS 2.24, DESTROY 2.30, "
                "ALLOC_HOST 2.30.7; older "
                "versions ignore a name they do not know",
            ),
            verified=(
                _H200
                + ": NCCL_DEBUG_SUBSYS=TUNING alone prints TUNING lines but no `set by environment` line",
            ),
            source="ncclDebugInit, src/debug.cc; per-call TUNING lines, src/enqueue.cc",
            checked_at=(
                "v2.19.4-1",
                "v2.20.3-1",
                "v2.21.5-1",
                "v2.22.3-1",
                "v2.23.4-1",
                "v2.24.3-1",
                "v2.28.9-1",
                "v2.30.3-1",
                "v2.30.7-1",
            ),
        ),
        Knob(
            name="NCCL_DEBUG_FILE",
            scope=Scope.PROCESS,
            kind=Kind.PATH,
            summary="Log file; %h is the hostname, %p the pid. Overwritten, not appended.",
            syntax="a path; %h hostname, %p pid, %% a percent sign; used only when NCCL_DEBUG is above VERSION",
            risks=("without %p every process of a host writes the same file",),
            source="ncclDebugInit, src/debug.cc",
            checked_at=("v2.21.5-1", "v2.28.9-1"),
        ),
        Knob(
            name="NCCL_TOPO_FILE",
            scope=Scope.COMMUNICATOR,
            kind=Kind.PATH,
            summary="XML topology to load instead of probing.",
            log_proof="`NCCL_TOPO_FILE set by environment to <path>`",
            source="ncclTopoGetSystem, src/graph/topo.cc",
            checked_at=("v2.28.9-1",),
        ),
        Knob(
            name="NCCL_TOPO_DUMP_FILE",
            scope=Scope.COMMUNICATOR,
            kind=Kind.PATH,
            summary="Write the detected topology as XML (rank NCCL_TOPO_DUMP_FILE_RANK, default 0).",
            log_proof="`NCCL_TOPO_DUMP_FILE set by environment to <path>`",
            source="src/graph/topo.cc, src/init.cc",
            checked_at=("v2.21.5-1", "v2.28.9-1"),
        ),
        Knob(
            name="NCCL_GRAPH_DUMP_FILE",
            scope=Scope.COMMUNICATOR,
            kind=Kind.PATH,
            summary="Write the searched rings/trees (channels per graph) as XML (rank "
            "NCCL_GRAPH_DUMP_FILE_RANK, default 0).",
            log_proof="`NCCL_GRAPH_DUMP_FILE set by environment to <path>`",
            source="ncclGetEnv in ncclTopoDumpGraphs, src/graph/search.cc; NCCL_GRAPH_DUMP_FILE_RANK, "
            "src/init.cc",
            checked_at=("v2.21.5-1", "v2.28.9-1"),
            unverified=(
                "whether a one-rank communicator writes the graph dump (the H200 run of topo --check shows it)",
            ),
        ),
        Knob(
            name="NCCL_LAUNCH_MODE",
            scope=Scope.COMMUNICATOR,
            kind=Kind.CHOICE,
            values=("PARALLEL", "GROUP"),
            logged_once=True,
            summary="How kernels of several GPUs in one process are launched; GROUP is deprecated since 2.9.",
            default="PARALLEL",
            syntax="GROUP in any case (strcasecmp, 2.13+; exact case before); any other value means PARALLEL",
            version_notes=(
                "2.13+: compared case-insensitively and re-read at every communicator creation (by its "
                "first rank in the process) into a process-wide setting, logged only the first time",
                "2.12 and older: exact case (strcmp), kept per communicator and logged as written at each",
            ),
            log_proof="`NCCL_LAUNCH_MODE set by environment to PARALLEL|GROUP` (normalised), once per process",
            source="ncclGetEnv in initTransportsRank, process-global ncclParamLaunchMode, src/init.cc; "
            "deprecation: docs/userguide/source/env.rst",
            checked_at=(
                "v2.12.12-1",
                "v2.13.4-1",
                "v2.14.3-1",
                "v2.21.5-1",
                "v2.28.9-1",
                "v2.30.7-1",
            ),
        ),
        Knob(
            name="NCCL_TUNER_PLUGIN",
            scope=Scope.PROCESS,
            kind=Kind.TEXT,
            summary="Tuner plugin library: a name, libnccl-tuner-<name>.so or a path; `none` (2.28+).",
            syntax="a name or path; `none` (any case, 2.28+) turns plugins off",
            version_notes=(
                "2.28+: `none`, a `NCCL_TUNER_PLUGIN set by environment` line and `Successfully loaded "
                "external tuner plugin <name>`; before, `TUNER/Plugin: Using tuner plugin <name>`",
            ),
            risks=(
                "a failed load (or `none`) stays failed for the rest of the process: no later communicator "
                "retries; a loaded plugin is re-read only after every communicator using it is destroyed",
            ),
            log_proof="2.28+: `Successfully loaded external tuner plugin <name>`; 2.21-2.27: "
            "`TUNER/Plugin: Using tuner plugin <name>`",
            source="ncclTunerPluginLoad (status tunerPluginLoadFailed is never reset), src/plugin/tuner.cc; "
            "src/misc/tuner.cc (2.21); the 2.27 log line, src/plugin/tuner/tuner_v4.cc",
            checked_at=("v2.21.5-1", "v2.27.7-1", "v2.28.3-1", "v2.28.9-1", "v2.30.7-1"),
        ),
        Knob(
            name="NCCL_TUNER_CONFIG_FILE",
            scope=Scope.COMMUNICATOR,
            kind=Kind.PATH,
            summary="CSV for NCCL's example tuner plugin (2.27.5+): per size range algorithm/protocol/channels.",
            default="nccl_tuner.conf in the working directory",
            since="2.27.5",
            syntax="CSV: collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"
            "[,numPipeOps[,regBuff]]"
            " (the first 8 fields are required); -1 keeps NCCL's choice; # comments",
            log_proof="`TUNER/ExamplePlugin: Loaded config: ...` per row (TUNING)",
            source="getenv in pluginInit (per communicator) and CONFIG_FIELDS_REQUIRED 8, "
            "ext-tuner/example/plugin.c",
            checked_at=("v2.27.3-1", "v2.27.5-1", "v2.28.9-1"),
        ),
    )
}


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


def knob(name: str) -> Knob | None:
    return KNOBS.get(name)


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
