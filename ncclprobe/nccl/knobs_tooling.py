"""Rows of the NCCL knowledge table for how NCCL is observed and steered: its parameter cache
(NCCL_NO_CACHE), its debug log (levels, subsystems and the release each subsystem appeared in, the
log file), the topology and graph files it reads or writes, its launch mode and tuner plugins.

One of the table's two files of rows (the other, `knobs_datapath`, holds what the collectives run
with); `ncclprobe.nccl.knobs` joins them into `KNOBS`, after those, and answers questions about
them. Each row's facts were read in NCCL's source at the tags in its `checked_at`.
"""

from __future__ import annotations

from ncclprobe.nccl.knob_row import H200_RUN, Kind, Knob, Scope

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

ROWS: tuple[Knob, ...] = (
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
            H200_RUN
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
