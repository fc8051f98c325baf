"""Rows of the NCCL knowledge table for the data path: what NCCL may choose for a collective
(NCCL_PROTO, NCCL_ALGO) and what it moves the data with (the P2P and SHM transports, buffers,
threads, channels and CTAs, NVLink SHARP, cuMem, LL128 over a network hop).

One of the table's two files of rows (the other, `knobs_tooling`, holds how NCCL is observed and
steered); `ncclprobe.nccl.knobs` joins them into `KNOBS`, in this order, and answers questions
about them. Each row's facts were read in NCCL's source at the tags in its `checked_at`.
"""

from __future__ import annotations

from ncclprobe.nccl.knob_row import H200_RUN, PARAM_CACHE, PARAM_TAGS, Kind, Knob, Scope
from ncclprobe.nccl.names import ALGORITHM_TOKENS, PROTOCOL_TOKENS
from ncclprobe.nccl.p2p import (
    LEGACY_P2P_LEVELS,
    P2P_LEVEL_SINCE,
    P2P_LEVELS,
    P2P_LEVELS_UNDOCUMENTED,
)

ROWS: tuple[Knob, ...] = (
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
            H200_RUN
            + ": ^LL gives matrix LL 0 / LL128 1 / Simple 1 and NCCL then picks RING/LL128 for "
            "1K and 64K on a path without NVLink (tests/fixtures/nccl_logs/*proto_excl_ll_tuning.log)",
            H200_RUN
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
            H200_RUN
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
            H200_RUN
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
        number_use=(
            ("1", "P2P off"),
            ("else", "P2P stays on: NCCL turns it off only at exactly 1 (`disable == 1`)"),
        ),
        unset_reads_as=0,
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
        source=PARAM_CACHE + ", src/transport/shm.cc",
        number_use=(
            ("1", "SHM off"),
            (
                "else",
                "SHM stays on: NCCL turns it off only at exactly 1 (`ncclParamShmDisable() == 1`)",
            ),
        ),
        unset_reads_as=0,
        checked_at=PARAM_TAGS,
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
        source=PARAM_CACHE + ", src/init.cc",
        checked_at=PARAM_TAGS,
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
        source=PARAM_CACHE + "; getNthreads, src/graph/tuning.cc; limits: src/include/device.h "
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
        source=PARAM_CACHE + ", src/graph/connect.cc; deprecation: docs/userguide/source/env.rst",
        checked_at=(*PARAM_TAGS, "v2.30.7-1"),
    ),
    Knob(
        name="NCCL_MAX_NCHANNELS",
        scope=Scope.PROCESS,
        kind=Kind.INT,
        nccl_param=True,
        summary="Upper bound on channels (deprecated in 2.17 for NCCL_MAX_CTAS).",
        log_proof="`NCCL_MAX_NCHANNELS set by environment to N.`",
        source=PARAM_CACHE + ", src/graph/connect.cc; deprecation: docs/userguide/source/env.rst",
        checked_at=(*PARAM_TAGS, "v2.30.7-1"),
    ),
    Knob(
        name="NCCL_MIN_CTAS",
        scope=Scope.PROCESS,
        kind=Kind.INT,
        nccl_param=True,
        summary="Lower bound on CTAs (channels); overrides ncclConfig_t.minCTAs.",
        since="2.17",
        source=PARAM_CACHE + "; envConfigOverride, src/init.cc",
        checked_at=("v2.17.1-1", "v2.28.9-1"),
    ),
    Knob(
        name="NCCL_MAX_CTAS",
        scope=Scope.PROCESS,
        kind=Kind.INT,
        nccl_param=True,
        summary="Upper bound on CTAs (channels); overrides ncclConfig_t.maxCTAs.",
        since="2.17",
        source=PARAM_CACHE + "; envConfigOverride, src/init.cc",
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
        source=PARAM_CACHE + ", src/transport/nvls.cc",
        number_use=(
            ("0", "NVLink SHARP off"),
            ("2", "auto: on where the GPUs report multicast support"),
            (
                "1",
                "forced on without checking multicast support; a failed multicast bind fails the job",
            ),
            (
                "else",
                "forced on without checking multicast support (only 2 checks it: "
                "`ncclParamNvlsEnable() == 2`); a failed multicast bind is skipped (only 1 makes it fatal: "
                "`ncclParamNvlsEnable() == 1`)",
            ),
        ),
        unset_reads_as=2,
        checked_at=PARAM_TAGS,
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
        source=PARAM_CACHE
        + ", src/misc/cudawrap.cc; read by every communicator, one rank included "
        "(fillInfo, src/init.cc); transport lines, src/transport/p2p.cc",
        number_use=(
            ("-2", "auto: on where the driver supports cuMem (2.19+)"),
            ("0", "cuMem off"),
            (">0", "cuMem on: NCCL uses any value above 0 as on (`param >= 0 ? param`)"),
            (
                "else",
                "cuMem off (2.19+: a negative value other than -2; before 2.19 any non-zero is on)",
            ),
        ),
        unset_reads_as=-2,
        checked_at=("v2.18.6-1", "v2.19.1-1", *PARAM_TAGS),
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
        source=PARAM_CACHE + "; NCCL_PARAM(Ll128C2c) in ncclTopoTuneModel, src/graph/tuning.cc",
        number_use=(
            ("0", "off"),
            (
                "else",
                "on: NCCL tests it as true or false (`ncclParamLl128C2c() && minCompCap >= 90`): any non-zero is on",
            ),
        ),
        unset_reads_as=1,
        checked_at=("v2.27.3-1", "v2.27.5-1", "v2.28.9-1", "v2.30.7-1"),
    ),
)
