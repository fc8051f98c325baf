"""Every fact the knowledge table states, read from NCCL's own source at each tag a row cites
(issue 28 §1, §3): a pinned excerpt per file and tag (tests/fixtures/nccl_source/), and per row a
check that what the row says (a default, a log level, a token list, a version) is what the excerpt
says. A wrong fact fails here, and so does a row that cites a tag or a file without an excerpt."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from ncclprobe.nccl.knob_row import Knob, Scope
from ncclprobe.nccl.knobs import KNOBS, NO_CACHE_SINCE, acts_on_one_rank, effective_scope
from ncclprobe.nccl.knobs_tooling import DEBUG_LEVELS, DEBUG_SUBSYSTEM_SINCE, DEBUG_SUBSYSTEMS
from ncclprobe.nccl.names import (
    ALGORITHM_SINCE,
    ALGORITHM_TOKENS,
    ALGORITHM_UNTIL,
    PROTOCOL_TOKENS,
    TUNED_FUNCTIONS,
)
from ncclprobe.nccl.p2p import (
    LEGACY_P2P_LEVELS,
    P2P_LEVEL_SINCE,
    P2P_LEVELS,
    P2P_LEVELS_UNDOCUMENTED,
    default_p2p_level,
    legacy_level,
    path_types,
)
from ncclprobe.nccl.version import Version, parse_version
from tests.nccl_source import Source, cited_paths, excerpt_files, load

CHECKS: dict[str, Callable[[Knob, Source], None]] = {}
PARAM_TAGS = ("v2.21.5-1", "v2.28.9-1", "v2.29.7-1")


def fact(*names: str):
    def register(check):
        for name in names:
            CHECKS[name] = check
        return check

    return register


def notes(row: Knob) -> str:
    return " ".join(row.version_notes)


def since_in(text: str, pattern: str) -> Version:
    """The version a row's text gives (`2.24+`, `since 2.19`) as the first group of `pattern`."""
    match = re.search(pattern, text)
    assert match, f"the row no longer says {pattern!r}: {text!r}"
    return parse_version(match[1] if match[1].count(".") == 2 else match[1] + ".0")


def _nccl_param(row: Knob, src: Source, path: str) -> str:
    """The row is an NCCL_PARAM read once per process (the macro's static cache, at the tags that
    excerpt it) and logged `NAME set by environment to N.`; returns its default as written."""
    if src.tag in PARAM_TAGS:
        assert src("src/include/param.h").has(r"static int64_t cache = uninitialized;")
        loader = src("src/misc/param.cc")
        assert loader.has(r"value = strtoll\(str, nullptr, 0\);")
        assert loader.has(r'INFO\(NCCL_ENV, ?"%s set by environment to %lld\."')
        assert row.nccl_param and row.scope is Scope.PROCESS
        if row.log_proof.startswith("`NCCL_"):
            assert re.match(rf"`{row.name} set by environment to (N|\d+)\.`", row.log_proof)
    return src(path).param(row.name.removeprefix("NCCL_"))


# -- NCCL_PROTO and NCCL_ALGO: ncclTopoTuneModel reads them, parseList parses them


def _read_per_communicator(row: Knob, src: Source) -> None:
    tuning = src("src/graph/tuning.cc")
    assert tuning.has(r"^ncclResult_t ncclTopoTuneModel\(") and row.scope is Scope.COMMUNICATOR
    assert tuning.has(rf'(getenv|ncclGetEnv)\("{row.name}"\)')
    logged = tuning.line(rf'"{row.name} set by environment to %s"')
    assert "INFO(NCCL_ENV" in logged and f"`{row.name} set by environment to <value>`" in (
        row.log_proof
    )
    assert "case-insensitive" in row.syntax and tuning.has(r"strcasecmp\((token|elem), elems")
    assert "^ excludes" in row.syntax or "^ prefix excludes" in row.syntax
    assert tuning.has(r"if \((str|elemList)\[0\] == '\^'\)")
    per_function = tuning.has(r'strtok_r\(fullStr, ";"')
    written = f"{row.syntax} {notes(row)}"
    assert per_function is (src.version >= since_in(written, r"(\d+\.\d+)\+:? per-collective"))
    if per_function:
        assert tuning.has(r'WARN\("Unrecognized element token') and tuning.has(
            r"(return|ret =) ncclInvalidUsage;"
        )
        names = src("src/init.cc").strings(r"ncclFuncStr\[")
        assert tuple(n.lower() for n in names) == TUNED_FUNCTIONS
    else:  # an unknown token is skipped without a word
        assert "WARN(" not in tuning.block(r"^ncclResult_t parseList\(")
        assert "2.23 and older ignore it silently" in notes(row)


def _unusable_list(row: Knob, src: Source) -> None:
    """What happens when the list leaves a collective nothing to run: 2.24+ the call fails."""
    if src.tag not in ("v2.23.4-1", "v2.24.3-1", "v2.28.9-1"):
        return
    enqueue = src("src/enqueue.cc")
    if src.version >= since_in(notes(row), r"(\d+\.\d+)\+: a list that leaves a collective"):
        assert enqueue.has(r'WARN\("Error : no algorithm/protocol available for function')
        assert enqueue.has(r"return \(algoEnv \|\| protoEnv\) \? ncclInvalidUsage")
        assert "`no algorithm/protocol available`, ncclInvalidUsage" in notes(row)
        assert "fails that collective's call" in notes(row)
        assert "not communicator creation" in notes(row)
    else:
        assert enqueue.has(r"info->algorithm = backupAlgo;")
        assert src("src/graph/tuning.cc").has(r"at least set ring algo available")
        assert "2.23 and older fall back to Ring" in notes(row)


@fact("NCCL_PROTO")
def _proto(row: Knob, src: Source) -> None:
    assert tuple(src("src/init.cc").strings(r"ncclProtoStr\[")) == PROTOCOL_TOKENS == row.values
    _read_per_communicator(row, src)
    _unusable_list(row, src)
    assert "no trailing period" in row.log_proof
    assert src("src/graph/tuning.cc").line(r'"NCCL_PROTO set by environment to %s"')
    matrix = src.version >= (2, 24, 0)
    assert src("src/graph/tuning.cc").has(r'"Enabled NCCL Func/Proto/Algo Matrix:%s"') is matrix
    if matrix:
        assert src("src/graph/tuning.cc").has(r"if \(comm->rank == 0 && \(algoStr\|\|protoStr\)\)")
        assert "2.24+ rank 0 also prints `Enabled NCCL Func/Proto/Algo Matrix:`" in row.log_proof


def accepted_algorithms(version: Version) -> set[str]:
    """The NCCL_ALGO tokens the table says `version` accepts (lower case)."""
    return {
        a.lower()
        for a in ALGORITHM_TOKENS
        if ALGORITHM_SINCE.get(a.lower(), (0, 0, 0)) <= version
        and version < ALGORITHM_UNTIL.get(a.lower(), (99, 0, 0))
    }


@fact("NCCL_ALGO")
def _algo(row: Knob, src: Source) -> None:
    names = src("src/init.cc").strings(r"ncclAlgoStr\[")
    assert (
        set(names) <= set(ALGORITHM_TOKENS) and row.values == ALGORITHM_TOKENS
    )  # spelled as NCCL spells them
    assert {n.lower() for n in names} == accepted_algorithms(src.version)
    _read_per_communicator(row, src)
    _unusable_list(row, src)
    if src.version >= (2, 24, 0):
        assert "(`Unrecognized element token`)" in notes(row)
        ring_only = src("src/graph/tuning.cc").line(
            r"ncclFuncBroadcast \|\| coll == ncclFuncReduce"
        )
        assert "a != NCCL_ALGO_RING) continue" in ring_only
        assert "broadcast, reduce" in row.risks[0] and "only Ring" in row.risks[0]


# -- NCCL_P2P_LEVEL and NCCL_P2P_DISABLE: ncclGetLevel, once per process


def level_names(src: Source) -> tuple[str, ...]:
    names = src("src/graph/topo.cc").strings(r"topoPathTypeStr\[\] *=")
    return tuple(names[: names.index("SYS") + 1])


@fact("NCCL_P2P_LEVEL")
def _p2p_level(row: Knob, src: Source) -> None:
    paths = src("src/graph/paths.cc")
    assert paths.has(r"for \(int i ?= ?0; i ?<= ?PATH_SYS; i\+\+\)")  # names up to SYS
    assert level_names(src) == path_types(src.version)
    known = set(P2P_LEVELS) | {
        name for name in P2P_LEVELS_UNDOCUMENTED if P2P_LEVEL_SINCE.get(name, (0,)) <= src.version
    }
    assert known == set(level_names(src)) and set(row.values) == set(P2P_LEVELS)
    assert paths.has(r"strcmp\(str, topoPathTypeStr\[i\]\) == 0") and row.case_sensitive
    old = re.findall(r"PATH_(\w+)", paths.line(r"static const int levelsOldToNew\[\]"))
    assert tuple(old) == LEGACY_P2P_LEVELS
    assert row.extra["legacy_integers"] == {str(i): name for i, name in enumerate(old)}
    assert paths.has(r"str\[0\] >= '0' && str\[0\] <= '9'")
    assert "a value starting with a digit is a legacy level" in row.syntax
    assert paths.has(r'"%s set by environment to %s", levelEnv, topoPathTypeStr\[l\]')
    assert "(normalised name: 2 logs PXB)" in row.log_proof and legacy_level("2") == "PXB"
    assert paths.has(r"int ncclTopoUserP2pLevel = -1") and row.scope is Scope.PROCESS
    _default_level(row, src)


def _default_level(row: Knob, src: Source) -> None:
    """ncclTopoCheckP2p's level when the variable is unset, as default_p2p_level computes it."""
    paths, shown = src("src/graph/paths.cc"), ".".join(map(str, src.version))
    changed = since_in(row.default, r"^(\d+\.\d+)\+: PXB")
    if src.version >= changed:
        assert paths.has(r"int p2pLevel = PATH_PXB;")
        cut = int(re.search(r"count <= (\d+)\)", paths.line(r"VENDOR_AMD\) && system"))[1])
        assert f"SYS for AMD CPUs with {cut} GPUs or fewer" in row.default
        assert default_p2p_level(shown, "amd", cut) == "SYS"
        assert default_p2p_level(shown, "amd", cut + 1) == "PXB"
        assert default_p2p_level(shown, "intel", cut) == "PXB"
    else:
        assert paths.has(r"int p2pLevel = PATH_SYS;")
        lowered = re.findall(r"(?:ARCH|VENDOR)_(ARM|INTEL|ZHAOXIN)\b", paths.text)
        assert set(lowered) == {"ARM", "INTEL", "ZHAOXIN"}
        assert "PXB on Intel, Zhaoxin and ARM CPUs" in row.default
        for vendor in ("arm", "intel", "zhaoxin"):
            assert default_p2p_level(shown, vendor, 4) == "PXB"
        assert default_p2p_level(shown, "amd", 4) == "SYS"


@fact("NCCL_P2P_DISABLE")
def _p2p_disable(row: Knob, src: Source) -> None:
    paths = src("src/graph/paths.cc")
    assert paths.has(r'ncclGetLevel\(&ncclTopoUserP2pLevel, "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"\)')
    assert paths.has(r"if \(disable == 1\) l = (0|PATH_LOC);") and row.values == ("0", "1")
    own_line = paths.has(r'"%s set by environment to %d", disableEnv, disable')
    assert own_line is (src.version >= since_in(row.log_proof, r"^(\d+\.\d+)\+: `NCCL_P2P_DISABLE"))
    if not own_line:  # the level line logs l = 0: LOC
        assert paths.has(r"^    if \(l >= 0\) INFO\(NCCL_ALL, \"%s set by environment to %s\"")
        assert "log `NCCL_P2P_LEVEL set by environment to LOC` instead" in row.log_proof


# -- NCCL_PARAM variables: name, default, where NCCL uses them


@fact("NCCL_SHM_DISABLE")
def _shm(row: Knob, src: Source) -> None:
    assert _nccl_param(row, src, "src/transport/shm.cc") == row.default == "0"


@fact("NCCL_NVLS_ENABLE")
def _nvls(row: Knob, src: Source) -> None:
    default = _nccl_param(row, src, "src/transport/nvls.cc")
    assert row.default == f"{default} (auto)" and default in row.values


@fact("NCCL_BUFFSIZE")
def _buffsize(row: Knob, src: Source) -> None:
    init = src("src/init.cc")
    assert _nccl_param(row, src, "src/init.cc") == "-2"  # -2: unset, the define applies
    assert init.has(r"envs\[p\] != -2 \? envs\[p\] : defaults\[p\]")
    shift = int(re.search(r"\(1 << (\d+)\)", init.line(r"#define DEFAULT_BUFFSIZE"))[1])
    assert row.default == f"{1 << shift} ({(1 << shift) >> 20} MiB)"
    assert "strtoll base 0" in row.syntax and "`4M` is read as 4" in row.syntax


@fact("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
def _nchannels(row: Knob, src: Source) -> None:
    which = row.name.split("_")[1]  # MIN or MAX
    if src.tag == "v2.30.7-1":
        doc = src("docs/userguide/source/env.rst")
        header = doc.lines[min(n for n, line in doc.lines.items() if line == row.name) + 2]
        deprecated = re.search(r"deprecated in (\d+\.\d+)\)", header)[1]
        successor = re.search(rf"deprecated in favor of ``(NCCL_{which}_\w+)``", doc.text)[1]
        assert f"(deprecated in {deprecated} for {successor})" in row.summary
        return
    assert _nccl_param(row, src, "src/graph/connect.cc") == "-2" and row.default == "unset"


@fact("NCCL_MIN_CTAS", "NCCL_MAX_CTAS")
def _ctas(row: Knob, src: Source) -> None:
    assert _nccl_param(row, src, "src/init.cc") == "NCCL_CONFIG_UNDEF_INT"
    assert row.default == "unset"
    if src.tag == row.checked_at[0]:
        assert src.version[:2] == parse_version(row.since + ".0")[:2]
    if src.tag == "v2.28.9-1":
        field = "minCTAs" if "MIN" in row.name else "maxCTAs"
        assert src("src/init.cc").has(rf"comm->config\.{field} = \w+CTAsEnv;")
        assert f"overrides ncclConfig_t.{field}" in row.summary


@fact("NCCL_CUMEM_ENABLE")
def _cumem(row: Knob, src: Source) -> None:
    default = _nccl_param(row, src, "src/misc/cudawrap.cc")
    auto = since_in(row.default, r"^auto since (\d+\.\d+)")
    if src.version >= auto:  # -2: on where cuMem is supported
        assert default == "-2"
        assert src("src/misc/cudawrap.cc").has(r"param == -2 && ncclCuMemSupported")
    else:
        assert default == "0" and "0 (off) before" in row.default
    if src.tag == "v2.28.9-1":
        init = src("src/init.cc")
        assert init.has(r"info->cuMemSupport = ncclCuMemEnable\(\);")
        assert init.has(r"^static ncclResult_t fillInfo\(") and init.has(r"fillInfo\(comm, ")
        assert acts_on_one_rank(row.name)  # every communicator reads it, one rank included
        p2p = src("src/transport/p2p.cc")
        assert p2p.has(r'"CUMEM"') and p2p.has(r"via P2P/IPC")
        assert "`via P2P/CUMEM` when on, `via P2P/IPC` when off" in row.log_proof


@fact("NCCL_NTHREADS")
def _nthreads(row: Knob, src: Source) -> None:
    assert _nccl_param(row, src, "src/graph/tuning.cc") == "-2"
    tuning = src("src/graph/tuning.cc")
    header = src("src/include/devcomm.h" if src.version < (2, 19, 0) else "src/include/device.h")
    warp = int(header.line(r"#define WARP_SIZE").split()[-1])
    simple = int(header.line(r"#define NCCL_SIMPLE_MAX_NTHREADS").split()[-1])
    ll = int(header.line(r"#define NCCL_LL_MAX_NTHREADS").split()[-1])
    assert row.multiple_of == warp and row.maximum == simple == ll
    assert tuning.has(r"2 ?\* ?WARP_SIZE, NCCL_SIMPLE_MAX_NTHREADS") and row.minimum == 2 * warp
    assert tuning.has(r"PCI_(BW|WIDTH)\) \? 256 : NCCL_SIMPLE_MAX_NTHREADS") and row.default == (
        f"256 or {simple} by link speed"
    )
    replaced = f"not a multiple of {warp} or above {simple} by {simple}, below {2 * warp} by "
    assert replaced + f"{2 * warp}" in row.syntax
    since, new, subsystems, old = re.search(
        r"(\d+\.\d+)\+: the `Invalid NCCL_NTHREADS` line is (\w+) \(([\w|]+)\); a (\w+) before",
        notes(row),
    ).groups()
    level = new if src.version >= parse_version(since + ".0") else old
    invalid = [line for line in tuning.lines.values() if '"Invalid %s %d' in line]
    assert len(invalid) == 3 and all(line.strip().startswith(f"{level}(") for line in invalid)
    if level == "INFO":
        flags = "|".join(f"NCCL_{s}" for s in subsystems.split("|"))
        assert all(flags in line.replace(" ", "") for line in invalid)
    assert (
        f"a {old} before {since}" in row.syntax and f"an {new} line of {subsystems}" in row.syntax
    )


@fact("NCCL_LL128_C2C")
def _ll128_c2c(row: Knob, src: Source) -> None:
    assert _nccl_param(row, src, "src/graph/tuning.cc") == row.default == "1"
    if src.tag == row.checked_at[0]:
        assert parse_version(row.since) == src.version
    rule = src("src/graph/tuning.cc")
    if src.version < (2, 27, 5):
        on, off = re.search(r"ncclParamLl128C2c\(\) \? PATH_(\w+) : PATH_(\w+)", rule.text).groups()
        assert f"1 lets sm90+ keep LL128 over a network hop up to {on}, 0 up to {off}" in notes(row)
    else:
        assert rule.has(r"if \(ncclParamLl128C2c\(\) && minCompCap >= 90\) \{")
        on = re.findall(r"typeInter <= PATH_(\w+)\);", rule.text)
        assert f"1 lets sm90+ keep LL128 up to {on[0]} (P2C included), 0 only up to {on[1]}" in (
            notes(row)
        )


# -- NCCL_NO_CACHE


@fact("NCCL_NO_CACHE")
def _no_cache(row: Knob, src: Source) -> None:
    assert parse_version(row.since) == NO_CACHE_SINCE
    if src.version < NO_CACHE_SINCE:
        assert not src("src/misc/param.cc").has(r"noCache")
        return
    if src.version < (2, 30, 0):
        param = src("src/misc/param.cc")
        assert param.has(r'ncclGetEnv\("NCCL_NO_CACHE"\)') and param.has(r'strtok\(copy, ","\)')
        assert param.has(r'strcmp\(token, "ALL"\) == 0') and param.has(r"noCacheSet\.count\(env\)")
        assert param.has(r"std::call_once\(once, ncclGetEnvNoCacheOnce\)")
        assert param.has(r'"Disabling caching for environment variable %s\."')
        assert "`Disabling caching for environment variable NCCL_X.`" in row.log_proof
    else:
        param = src("src/param/param.cc")
        assert param.has(r'"PARAM: Disabling caching for environment variable %s\."')
        assert "`PARAM: Disabling caching ...` from 2.30" in row.log_proof
        assert param.has(r'set\.count\("ALL"\)') and param.has(r"set\.count\(key\)")
        assert src("src/misc/param.cc").has(r"\*noCache = ncclParamIsCacheDisabled\(env\)")
    assert "exact case" in row.syntax and "or ALL" in row.syntax
    exact = {"NCCL_NO_CACHE": "nccl_buffsize"}  # compared exactly: another case matches nothing
    assert effective_scope("NCCL_BUFFSIZE", exact, src.version) is Scope.PROCESS
    listed = {"NCCL_NO_CACHE": "NCCL_BUFFSIZE"}
    assert effective_scope("NCCL_BUFFSIZE", listed, src.version) is Scope.COMMUNICATOR


# -- NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE: ncclDebugInit, once per process


@fact("NCCL_DEBUG")
def _debug(row: Knob, src: Source) -> None:
    debug = src("src/debug.cc")
    levels = re.findall(r'strcasecmp\(nccl_debug, "(\w+)"\)', debug.text)
    assert tuple(levels) == DEBUG_LEVELS == row.values and "any case (strcasecmp)" in row.syntax
    init = src("src/init.cc")
    since = since_in(notes(row), r"^(\d+\.\d+)\+: the version banner is an INFO line")
    if src.version >= since:
        assert init.has(r'INFO\(NCCL_ALL, ?"%s", VERSION_STRING\);')
        assert init.has(r"(pthread_once|std::call_once)\(&?once, showVersion\)")  # every process
    else:
        assert init.has(r'printf\("%s\\n", VERSION_STRING\);')
        assert init.has(r"if \(myrank == 0\) showVersion\(\);") and "rank 0 printed it bare" in (
            notes(row)
        )


def _default_subsystems(row: Knob, version: Version) -> set[str]:
    old, new, since = re.fullmatch(
        r"([\w,]+) \((\d+\.\d+) and older\), ([\w,]+) \((\d+\.\d+)\+\)", row.default
    ).group(1, 3, 4)
    return set((new if version >= parse_version(since + ".0") else old).split(","))


@fact("NCCL_DEBUG_SUBSYS")
def _debug_subsys(row: Knob, src: Source) -> None:
    debug = src("src/debug.cc")
    if src.version >= (2, 30, 7):  # a parameter with its options and its default
        names = re.findall(r'makeOption\("(\w+)", NCCL_\w+,\s*"', debug.text)
        mask = debug.lines[min(debug.lines) + 1]
        assert src("src/include/param/parser_bitset.h").has(r"Support '\^' prefix for negation")
    else:
        names = re.findall(r'strcasecmp\(subsys, "(\w+)"\)', debug.text)
        mask = debug.line(r"(ncclDebugMask|tempNcclDebugMask) = NCCL_INIT")
        assert debug.has(r"if \(ncclDebugSubsysEnv\[0\] == '\^'\)")
    known = {s for s in DEBUG_SUBSYSTEMS if DEBUG_SUBSYSTEM_SINCE.get(s, (0,)) <= src.version}
    assert set(names) == known, sorted(set(names) ^ known)
    assert set(re.findall(r"NCCL_(\w+)", mask)) == _default_subsystems(row, src.version)
    assert "^ prefix excludes" in row.syntax
    _tuning_lines(row, src)


def _tuning_lines(row: Knob, src: Source) -> None:
    """The per-call `Bytes -> Algo` line of src/enqueue.cc, at the tags that excerpt it."""
    if src.tag not in (
        "v2.19.4-1",
        "v2.20.3-1",
        "v2.21.5-1",
        "v2.23.4-1",
        "v2.24.3-1",
        "v2.28.9-1",
    ):
        return
    info, named = re.search(
        r"(\d+\.\d+)\+: TUNING per-call lines are INFO \(TRACE before\); (\d+\.\d+)\+ they name",
        notes(row),
    ).groups()
    line = src("src/enqueue.cc").line(r"INFO\(NCCL_TUNING, \"(%s: )?%ld Bytes -> Algo")
    assert line.lstrip().startswith("//") is (src.version < parse_version(info + ".0"))
    assert ("Algo %s proto %s" in line) is (src.version >= parse_version(named + ".0"))


@fact("NCCL_DEBUG_FILE")
def _debug_file(row: Knob, src: Source) -> None:
    debug = src("src/debug.cc")
    assert debug.has(r"if \(tempNcclDebugLevel > NCCL_LOG_VERSION && ncclDebugFileEnv != NULL\)")
    assert "used only when NCCL_DEBUG is above VERSION" in row.syntax
    cases = set(re.findall(r"case '(.)':", debug.text))
    assert cases == {"%", "h", "p"} and "%h hostname, %p pid, %% a percent sign" in row.syntax
    assert debug.has(r'fopen\(debugFn, "w"\)') and "Overwritten, not appended" in row.summary


# -- topology and graph files, read per communicator


@fact("NCCL_TOPO_FILE")
def _topo_file(row: Knob, src: Source) -> None:
    topo = src("src/graph/topo.cc")
    assert topo.has(r"^ncclResult_t ncclTopoGetSystem\(") and row.scope is Scope.COMMUNICATOR
    assert topo.has(r'ncclGetEnv\("NCCL_TOPO_FILE"\)')
    assert topo.has(r'INFO\(NCCL_ENV, "NCCL_TOPO_FILE set by environment to %s"')
    assert row.log_proof == "`NCCL_TOPO_FILE set by environment to <path>`"


@fact("NCCL_TOPO_DUMP_FILE")
def _topo_dump(row: Knob, src: Source) -> None:
    topo = src("src/graph/topo.cc")
    rank = topo.param("TOPO_DUMP_FILE_RANK")
    assert f"(rank NCCL_TOPO_DUMP_FILE_RANK, default {rank})" in row.summary
    reader = src("src/init.cc") if src.version >= (2, 28, 0) else topo
    assert reader.has(r'ncclGetEnv\("NCCL_TOPO_DUMP_FILE"\)') and row.scope is Scope.COMMUNICATOR
    assert topo.has(r'"NCCL_TOPO_DUMP_FILE set by environment to %s"')
    assert row.log_proof == "`NCCL_TOPO_DUMP_FILE set by environment to <path>`"


@fact("NCCL_GRAPH_DUMP_FILE")
def _graph_dump(row: Knob, src: Source) -> None:
    search = src("src/graph/search.cc")
    assert search.has(r"^ncclResult_t ncclTopoDumpGraphs\(")
    assert search.has(r'ncclGetEnv\("NCCL_GRAPH_DUMP_FILE"\)')
    assert search.has(r'INFO\(NCCL_ENV, "NCCL_GRAPH_DUMP_FILE set by environment to %s"')
    rank = src("src/init.cc").param("GRAPH_DUMP_FILE_RANK")
    assert f"NCCL_GRAPH_DUMP_FILE_RANK, default {rank})" in row.summary


# -- NCCL_LAUNCH_MODE


@fact("NCCL_LAUNCH_MODE")
def _launch_mode(row: Knob, src: Source) -> None:
    assert row.values == ("PARALLEL", "GROUP") and row.scope is Scope.COMMUNICATOR
    if src.tag == "v2.30.7-1":
        doc = src("docs/userguide/source/env.rst")
        section = doc.text[doc.text.index("NCCL_LAUNCH_MODE\n") :]
        assert f"The default value is {row.default}." in section
        deprecated = re.search(r"deprecated in (\d+\.\d+)", section)[1]
        assert f"GROUP is deprecated since {deprecated}" in row.summary
    init = src("src/init.cc")
    if src.version < since_in(notes(row), r"(\d+\.\d+)\+: compared case-insensitively"):
        assert init.has(r'strcmp\(str, "GROUP"\) == 0') and init.has(r"comm->launchMode = ")
        assert init.has(r'INFO\(NCCL_ENV, "NCCL_LAUNCH_MODE set by environment to %s", str\)')
        assert "exact case (strcmp), kept per communicator and logged as written" in notes(row)
        return
    assert init.has(r'strcasecmp\(str, "GROUP"\) == 0') and not row.case_sensitive
    assert init.has(r"^enum ncclLaunchMode ncclParamLaunchMode;")  # one setting per process
    assert init.has(r"if \(comm->intraRank == 0\)") and "by its first rank in the process" in (
        notes(row)
    )
    assert init.has(r"if \(modeOld == ncclLaunchModeInvalid && str && str\[0\] ?!= ?'\\0'\)")
    assert init.has(r'mode == ncclLaunchModeParallel \? "PARALLEL" : "GROUP"')
    assert row.logged_once and "(normalised), once per process" in row.log_proof


# -- the tuner plugin and the example tuner's config file


@fact("NCCL_TUNER_PLUGIN")
def _tuner_plugin(row: Knob, src: Source) -> None:
    none_since = since_in(row.summary, r"`none` \((\d+\.\d+)\+\)")
    if src.tag == "v2.21.5-1":
        tuner = src("src/misc/tuner.cc")
        assert tuner.has(r'getenv\("NCCL_TUNER_PLUGIN"\)')
        assert tuner.has(r'"TUNER/Plugin: Using tuner plugin %s"')
        assert "2.21-2.27: `TUNER/Plugin: Using tuner plugin <name>`" in row.log_proof
        assert tuner.has(r"status = tunerPluginLoadFailed;")
        assert not tuner.has(r"^\s+status = tunerPluginLoadReady;")  # not in the load path
        return
    tuner = src("src/plugin/tuner.cc")
    unload = [
        line for line in tuner.lines.values() if re.match(r"\s+status = tunerPluginLoadReady", line)
    ]
    assert len(unload) == 1 and tuner.has(
        r"if \(comm->tunerPluginLoaded && 0 == \(--tunerPluginRefCount\)\)"
    )
    assert tuner.has(r"if \(tunerPluginLoadFailed == status\)") and "stays failed" in row.risks[0]
    assert "re-read only after every communicator using it is destroyed" in row.risks[0]
    none = tuner.has(r'strcasecmp\(tunerName, "none"\) == 0')
    assert none is (src.version >= none_since)
    if none:
        assert tuner.has(r'"NCCL_TUNER_PLUGIN set by environment to %s"')
        assert tuner.has(r'"Successfully loaded external tuner plugin %s"')
        assert "`none` (any case, 2.28+)" in row.syntax
        assert "2.28+: `Successfully loaded external tuner plugin <name>`" in row.log_proof
    else:
        assert src("src/plugin/tuner/tuner_v4.cc").has(r'"TUNER/Plugin: Using tuner plugin %s"')


@fact("NCCL_TUNER_CONFIG_FILE")
def _tuner_config(row: Knob, src: Source) -> None:
    plugin = src("ext-tuner/example/plugin.c")
    reads = plugin.has(r'getenv\("NCCL_TUNER_CONFIG_FILE"\)')
    assert reads is (src.version >= parse_version(row.since))
    if not reads:
        assert plugin.has(r"pluginInit\(")  # the function that reads it from 2.27.5 on
        return
    required = int(plugin.line(r"#define CONFIG_FIELDS_REQUIRED").split()[2])
    most = int(plugin.line(r"#define CONFIG_FIELDS_MAX").split()[2])
    fields = row.syntax.split("CSV: ")[1].split(" ")[0].replace("[", "").replace("]", "")
    assert len(fields.split(",")) == most and f"(the first {required} fields are required)" in (
        row.syntax
    )
    assert plugin.has(r'configFile = "nccl_tuner.conf";') and row.default.startswith(
        "nccl_tuner.conf"
    )
    assert plugin.has(r"ncclResult_t pluginInit\(") and row.scope is Scope.COMMUNICATOR
    assert plugin.has(r'"TUNER/ExamplePlugin: Loaded config: ') and "Loaded config" in row.log_proof


# -- the tests


ROWS = [(name, tag) for name, row in KNOBS.items() for tag in row.checked_at]


def test_every_excerpt_is_well_formed():
    """Headers name the repository, the folder's tag, the file's path, one commit per tag."""
    commits: dict[str, set[str]] = {}
    for tag, path in excerpt_files():
        excerpt = load(tag, path)
        assert excerpt.lines, (tag, path)
        commits.setdefault(tag, set()).add(excerpt.commit)
    assert all(len(c) == 1 for c in commits.values()), commits


def test_every_row_that_cites_a_source_has_a_check():
    cited = {name for name, row in KNOBS.items() if row.source or row.checked_at}
    assert set(CHECKS) == cited


@pytest.mark.parametrize("name, tag", ROWS, ids=[f"{n}@{t}" for n, t in ROWS])
def test_the_row_states_what_nccl_source_says(name, tag):
    source = Source(tag)
    CHECKS[name](KNOBS[name], source)
    assert source.read, f"{name}: the check read no excerpt at {tag}"


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_every_file_a_row_cites_is_read_at_one_of_its_tags(name):
    """A file named in `source` without an excerpt (or whose excerpt no check reads) fails."""
    row, read = KNOBS[name], set()
    for tag in row.checked_at:
        source = Source(tag)
        CHECKS[name](row, source)
        read |= source.read
    assert cited_paths(row.source) <= read, sorted(cited_paths(row.source) - read)
    assert cited_paths(row.source), f"{name} names no file of NCCL's source"
