"""Read NCCL_DEBUG=INFO/WARN logs (NCCL 2.8 to 2.30) into facts: version, environment NCCL read,
communicator sizes, transports, per-call algorithm/protocol choices and warnings.

This is the proof reader of the project: the sweep and env-check ask it whether a setting
reached NCCL (`set by environment` lines) and what NCCL then did (TUNING lines, transports).
Formats follow ../shared/reference/nccl-facts.md §3, which cites the NCCL source:

- prefix `host:pid:tid [cudaDev] NCCL INFO|WARN ...` (WARN may add `file.cc:line `, TRACE a time);
- version banner bare (`NCCL version 2.8.3+cuda11.2`, rank 0, up to 2.21) or as an INFO line (2.22+);
- `VAR set by environment to VALUE` - integer parameters end with a period, strings do not;
- TUNING per-call lines in three generations: numeric codes (2.20-2.22), a function-name
  prefix with codes (2.23), names (2.24+).

Real logs interleave application output, mpirun tags and timestamps; anything that is not an
NCCL line is skipped, never an error.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.evidence.failure_lines import FailureLines
from ncclprobe.evidence.text import clean_line, read_text_lines, strip_ansi
from ncclprobe.nccl import lint
from ncclprobe.nccl.lint_finding import SettingFinding
from ncclprobe.nccl.names import ALGORITHM_NAMES, PROTOCOL_NAMES, canonical
from ncclprobe.numbers import ascii_re, is_digits
from ncclprobe.secrets import mask_env, mask_env_value, mask_text
from ncclprobe.verdict import Verdict, worst

# The host must start where a host name can start (after the line's start, a space, `:`, `[` or
# `]`): without that look-behind the engine tries the pattern from every character of a long run
# without spaces, and an 800,000-character line took tens of minutes (quadratic; now linear).
_PREFIX = ascii_re(
    r"(?<![^\s:\[\]])(?P<host>[^\s:\[\]]+):(?P<pid>[0-9]{1,19}):(?P<tid>[0-9]{1,19}) \[(?P<dev>[0-9]{1,19})\] "
    r"(?:[0-9.]+ )?(?:(?P<where>(?:[\w:*&<>~]+ ){0,6}[^\s()]+(?:\([^()]{0,400}\))?):[0-9]{1,19}"
    r"(?: \(\S{1,200}\))? )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|ABORT)\b ?(?P<msg>.*)$"
)
# A plugin's WARN may carry its function for a file: aws-ofi-nccl's `configure_nvls_option:287 NCCL
# WARN` or, with the C++ signature, `int cm_req_handle_error_entry(nccl_net_ofi_context_t*, ...):46`.
# 2.30.7+ puts the function after a WARN's `file:line` (`graph/xml.cc:419 (ncclTopoGetPciNode) NCCL
# WARN`, src/debug.cc); an error's return path is INFO lines `file:line -> code` (src/include/checks.h;
# `file:line (func) -> code` in 2.30.7+, `-> code (strerror)` after a system call since 2.19)
_RETURN = ascii_re(
    r"^(?P<file>[\w./-]+\.(?:cc|h|c|cpp)):[0-9]{1,19}(?: \(\S{1,200}\))? -> (?P<code>\d{1,9})\b"
    r"(?: \((?P<why>[^()]{1,120})\))?"
)
# NCCL 2.26+ starts WARN lines with `[%F %T] ` (NCCL_DEBUG_TIMESTAMP_FORMAT); `clean_line` drops it
_WARN_TIME = ascii_re(r"^\[(?P<time>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,19})?)\]")
_VERSION = ascii_re(r"^NCCL version (?P<full>(?P<v>\d{1,19}\.\d{1,19}\.\d{1,19})\S*)")
# RCCL (ROCm's NCCL) prints `RCCL version 2.20.5+hip6.2 HEAD:d380693+` (to 2.20) or a block that
# starts `RCCL version : 2.21.5-HEAD:9a0e6a1` (2.21+); its number is the NCCL release it follows
_RCCL_VERSION = ascii_re(r"^RCCL version\s*:?\s*(?P<full>(?P<v>\d{1,19}\.\d{1,19}\.\d{1,19})\S*)")
_VLLM_NCCL = ascii_re(r"vLLM is using nccl==(?P<full>(?P<v>\d{1,19}\.\d{1,19}\.\d{1,19})\S*)")
# nccl-tests / rccl-tests: `host: Test NCCL failure common.cu:1204 'unhandled cuda error ...'`, `Test CUDA
# failure common.cu:892 'an illegal memory access was encountered'`, before 2.0 `Cuda failure ...`
_TEST_FAILURE = ascii_re(r"(?:NCCL|CUDA|Cuda|HIP) failure \S+ '(?P<what>[^']*)'")
# which network NCCL uses (src/init.cc), and a network plugin it looked for and did not find
# (2.19+ src/plugin/plugin_open.cc `NET/Plugin: Could not find: libnccl-net.so...`; before, src/net.cc
# `NET/Plugin : No plugin found (libnccl-net.so), using internal implementation`)
# the frames nccl-tests prints under its failure (`.. host pid 123: Test failure common.cu:915`)
_TEST_TRACE = ascii_re(r"\bTest failure \S+:\d+\s*$")
_NETWORK = ascii_re(r"^Using network (?P<name>\S.*?)\s*$")
_NO_PLUGIN = ascii_re(r"^NET/Plugin ?: (?:Could not find:|No plugin found)")
# a network plugin's lines: `NET/<Tag> ...` of a tag NCCL itself does not use (its own: src/ at
# 2.7-2.30), or NCCL's `NET/Plugin: Loaded net plugin NAME (vN)` (2.19+, src/plugin/net/net_v*.cc)
NET_OWN_TAGS = ("IB", "Socket", "Plugin", "MLX5")
_NET_TAG = ascii_re(r"^NET/(?P<tag>[A-Za-z][\w-]{0,40})\b")
_NET_LOADED = ascii_re(r"^NET/Plugin ?: Loaded (?:net|collnet) plugin (?P<name>\S+)")
_QUOTE = ascii_re(r"^(?:>\s?)+")  # a log pasted as a Markdown quote
_SET_BY_ENV = ascii_re(r"^(?P<var>[A-Z][A-Z0-9_]*) set by environment to ?(?P<value>.*)$")
_INT_WITH_PERIOD = ascii_re(r"^-?\d{1,19}\.$")
_COMM_INIT = ascii_re(
    r"^(?:(?P<api>ncclComm\w+) )?comm (?P<comm>0x[0-9a-f]+|\(nil\)) rank (?P<rank>\d{1,19}) "
    r"nranks (?P<nranks>\d{1,19}) cudaDev (?P<dev>\d{1,19})(?: nvmlDev \d{1,19})? busId (?P<bus>[0-9a-f]+)(?![0-9a-f])"
    r".* - Init (?P<phase>START|COMPLETE)"
)
_COMM_SHAPE = ascii_re(
    r"^comm (?P<comm>0x[0-9a-f]+|\(nil\)) rank (?P<rank>\d{1,19}) nRanks (?P<nranks>\d{1,19}) "
    r"nNodes (?P<nnodes>\d{1,19}) localRanks (?P<local>\d{1,19})"
)
_CONNECTION = ascii_re(
    r"^Channel \d{1,19}(?:/\d{1,19})? : \d{1,19}\[[0-9a-fx]+\] -> \d{1,19}\[[0-9a-fx]+\]"
    r"(?: \[(?:send|receive)\])? via (?P<via>\S.*)$"
)
_RING = ascii_re(r"^Channel \d{1,19}/(?P<n>\d{1,19}) :(?:\s+\d{1,19})+$")
_TREES = ascii_re(
    r"^Trees((?: \[\d{1,19}\] -?\d{1,19}/-?\d{1,19}/-?\d{1,19}->-?\d{1,19}->-?\d{1,19})+)"
)
_TUNING = ascii_re(
    r"^(?:(?P<coll>[A-Za-z]+): )?(?P<bytes>\d{1,19}) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: time (?P<time>\d{1,19}(?:\.\d{1,19})?))?(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d{1,19})\.\.(?P<hi>\d{1,19})\})?"
)
_SYMMETRIC = ascii_re(
    r"^(?P<coll>[A-Za-z]+) \[Symmetric\]: (?P<bytes>\d{1,19}) Bytes -> Kernel (?P<kernel>\S+)"
)
_CALL = ascii_re(
    r"^(?P<coll>[A-Za-z]+): opCount [0-9a-f]+ .*count (?P<count>\d{1,19}) datatype (?P<dtype>\d{1,19})"
)
_CONNECTED = ascii_re(r"^Connected all (?P<what>rings|trees)")
# `%d coll channels, %d p2p channels, %d p2p channels per peer` (2.7-2.16, src/graph/paths.cc then
# src/init.cc), with `%d nvls channels` (2.17-2.19), with `%d collnet channels` too (2.20+). The
# collnet number is not kept: 2.21+ fills it with nChannels, the coll count (src/init.cc).
_CHANNEL_COUNTS = ascii_re(
    r"^(?P<coll>\d{1,19}) coll channels, (?:\d{1,19} collnet channels, )?"
    r"(?:(?P<nvls>\d{1,19}) nvls channels, )?(?P<p2p>\d{1,19}) p2p channels"
)
_TUNER = ascii_re(
    r"^(?:TUNER/Plugin: )?(?:Using tuner plugin:? '?(?P<name>[^'\s]+)'?|.*Using internal tuner plugin)"
    r"|^Successfully loaded external tuner plugin (?P<name2>\S+)"
)
_MATRIX_START = ascii_re(r"^Enabled NCCL Func/Proto/Algo Matrix:")
_MATRIX_ROW = ascii_re(r"^\s*(?P<func>[A-Za-z]+) \|(?P<protos>[^|]*)\|(?P<algos>[^|]*)$")


@dataclass(frozen=True)
class TuningEntry:
    """One algorithm/protocol choice NCCL logged for one collective call (rank 0 only)."""

    collective: str | None  # "AllReduce"; None in 2.20-2.22, whose lines carry no function name
    bytes: int
    algo: str  # "RING", "TREE", ... never a numeric code
    proto: str  # NCCL's name of it (ncclprobe.nccl.names), never a numeric code
    channels: tuple[int, int] | None = None  # channel{Lo..Hi} (2.24+)
    predicted_time_us: float | None = None  # the cost model's time (2.20-2.23)
    pid: int | None = None

    def to_json(self) -> dict:
        return {
            "collective": self.collective,
            "bytes": self.bytes,
            "algo": self.algo,
            "proto": self.proto,
            "channels": list(self.channels) if self.channels else None,
            "predicted_time_us": self.predicted_time_us,
            "pid": self.pid,
        }


@dataclass
class NcclLog:
    """Everything read from one or more NCCL debug logs; empty fields mean "not in the log"."""

    nccl_version: str | None = None  # "2.28.9"
    nccl_version_full: str | None = None  # "2.28.9+cuda13.0"
    library: str | None = None  # "NCCL" or "RCCL", as its banner says
    version_source: str | None = None  # "banner", or "vLLM's log line" (vLLM is using nccl==X)
    failures: list[str] = field(
        default_factory=list
    )  # nccl-tests/rccl-tests' `NCCL/CUDA failure` lines
    # other lines that look like a failure (not NCCL's own lines): shown unless a class explains them
    failure_lines: FailureLines = field(default_factory=lambda: FailureLines("NCCL log"))
    networks: set[str] = field(default_factory=set)  # `Using network Socket|IB|AWS Libfabric|...`
    net_plugin_missing: str | None = None  # NCCL's line saying it found no network plugin
    versions: set[str] = field(default_factory=set)  # every version seen (mixed installs show >1)
    env: dict[str, str] = field(default_factory=dict)  # first value NCCL reported per variable
    env_values: dict[str, list[str]] = field(default_factory=dict)  # every distinct value, in order
    nranks: int | None = None  # largest communicator seen
    communicators: list[dict] = field(default_factory=list)
    transports: dict[str, int] = field(
        default_factory=dict
    )  # "P2P"/"SHM"/"NET" -> connection lines
    transport_details: dict[str, int] = field(default_factory=dict)  # "P2P/CUMEM/read" -> lines
    ring_channels: int | None = None
    tree_channels: int | None = None  # entries of a `Trees [0] a/b/c->r->p [1] ...` line
    channel_counts: dict[str, int] = field(default_factory=dict)
    connected: dict[str, int] = field(default_factory=dict)  # "rings"/"trees" -> lines
    tuning: list[TuningEntry] = field(default_factory=list)
    symmetric_kernels: list[dict] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)  # COLL-subsystem call lines per function
    enabled_matrix: dict[str, dict[str, list[str]]] | None = None  # 2.24+ Func/Proto/Algo matrix
    tuner_plugin: str | None = None
    warnings: list[str] = field(default_factory=list)
    warning_times: list[str | None] = field(default_factory=list)  # per WARN: `[%F %T]` (2.26+)
    warning_files: list[str | None] = field(
        default_factory=list
    )  # per WARN: the file that printed it
    # error return lines (`file:line -> 2`) per file, and the first `(strerror)` one gives per file
    returns: dict[str, int] = field(default_factory=dict)
    return_errors: dict[str, str] = field(default_factory=dict)
    net_tags: set[str] = field(default_factory=set)  # network plugins' names its lines show
    pids: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    nccl_lines: int = 0
    total_lines: int = 0

    def verdict(self, findings: Iterable[SettingFinding] = ()) -> Verdict:
        """FINDINGS on an NCCL WARN line, or on a lint error over the variables NCCL read (`findings`)."""
        return worst([Verdict.of(bool(self.warnings)), lint.verdict(findings)])

    def to_json(self) -> dict:
        """The facts for output: values and warnings masked (`ncclprobe.secrets`); `env` itself stays
        raw for the comparisons that prove a setting was read."""
        return {
            "schema_version": 1,
            "nccl_version": self.nccl_version,
            "nccl_version_full": self.nccl_version_full,
            "library": self.library,
            "version_source": self.version_source,
            "versions": sorted(self.versions),
            "env": mask_env(self.env),
            "env_values": {
                k: [mask_env_value(k, v) for v in values] for k, values in self.env_values.items()
            },
            "nranks": self.nranks,
            "communicators": list(self.communicators),
            "transports": dict(self.transports),
            "transport_details": dict(self.transport_details),
            "ring_channels": self.ring_channels,
            "tree_channels": self.tree_channels,
            "channel_counts": dict(self.channel_counts),
            "connected": dict(self.connected),
            "tuning": [t.to_json() for t in self.tuning],
            "symmetric_kernels": list(self.symmetric_kernels),
            "calls": dict(self.calls),
            "enabled_matrix": self.enabled_matrix,
            "tuner_plugin": self.tuner_plugin,
            "warnings": [mask_text(w) for w in self.warnings],
            "failures": [mask_text(f) for f in self.failures],
            "not_explained": self.failure_lines.to_json(),
            "networks": sorted(self.networks),
            "net_plugin_missing": self.net_plugin_missing,
            "warning_times": list(self.warning_times),
            "warning_files": list(self.warning_files),
            "returns": dict(self.returns),
            "return_errors": dict(self.return_errors),
            "net_tags": sorted(self.net_tags),
            "pids": sorted(self.pids),
            "hosts": sorted(self.hosts),
            "nccl_lines": self.nccl_lines,
            "total_lines": self.total_lines,
        }


def parse_nccl_log(text: str, source: str = "NCCL log") -> NcclLog:
    """Parse log text; never raises on garbage, returns whatever NCCL facts it found."""
    reader = _Reader()
    reader.log.failure_lines.source = source
    for raw in text.splitlines():
        reader.feed(clean_line(raw), raw)
    return reader.finish()


def parse_nccl_log_file(path: str | Path) -> NcclLog:
    """Parse one log file; an unreadable file is a UsageProblem naming it."""
    return parse_nccl_log_files([path])


def parse_nccl_log_files(paths: Iterable[str | Path]) -> NcclLog:
    """Several files (one per process) as one log, streamed line by line: only the facts are kept,
    never the text (`read_text_lines`)."""
    reader = _Reader()
    for path in paths:
        reader.source, reader.number = str(path), 0
        for raw in read_text_lines(path, "NCCL log"):
            reader.feed(clean_line(raw), raw)
    return reader.finish()


def algo_name(token: str) -> str:
    """`1` -> `RING` (2.20-2.23 codes); names are upper-cased; unknown codes stay visible as `ALGO_<n>`."""
    return _code_name(token, ALGORITHM_NAMES, "ALGO")


def proto_name(token: str) -> str:
    return _code_name(token, PROTOCOL_NAMES, "PROTO")


def _code_name(token: str, names: tuple[str, ...], kind: str) -> str:
    if is_digits(token):
        index = int(token)
        return names[index] if index < len(names) else f"{kind}_{index}"
    return canonical(token) or token.upper()  # the matrix's CamelCase too: one name each


class _Reader:
    """Line-by-line state: the only multi-line construct is the Func/Proto/Algo matrix."""

    def __init__(self) -> None:
        self.log = NcclLog()
        self.source: str | None = None  # the file being read (None: the text given)
        self.number = 0  # its line number
        self.ring_counts: Counter = Counter()
        self.transports: Counter = Counter()
        self.details: Counter = Counter()
        self.calls: Counter = Counter()
        self.connected: Counter = Counter()
        self.returns: Counter = Counter()
        self.matrix_header: list[list[str]] | None = (
            None  # [protocols, algorithms] while inside one
        )
        self.comms: dict[tuple, dict] = {}
        self.handlers = self._handlers()

    def feed(self, line: str, raw: str = "") -> None:
        self.log.total_lines += 1
        self.number += 1
        if self.matrix_header is not None and self._matrix_line(line):
            return
        # most lines of a real log are not NCCL's: a substring test rules them out before any regex
        match = _PREFIX.search(line) if "NCCL " in line else None
        if (
            "vLLM is using nccl==" in line
        ):  # vLLM's logger; pasted logs may run it into NCCL's lines
            found = _VLLM_NCCL.search(line)
            if found:
                self._version(found, None, source="vLLM's log line")
        if match is None:
            self._bare(line, raw)
            return
        log, pid = self.log, int(match["pid"])
        log.nccl_lines += 1
        log.pids.add(pid)
        log.hosts.add(match["host"])
        msg = match["msg"].strip()
        if match["level"] == "WARN":
            log.warnings.append(msg)
            stamp = _WARN_TIME.match(strip_ansi(raw)) if raw[:1] in "[\x1b" else None
            log.warning_times.append(stamp["time"] if stamp else None)
            log.warning_files.append(match["where"])
        if msg.startswith("NET/"):
            self._net_tag(msg)
        self._message(msg, pid)

    def _net_tag(self, msg: str) -> None:
        loaded = _NET_LOADED.match(msg)
        found = _NET_TAG.match(msg)
        if loaded:
            self.log.net_tags.add(loaded["name"])
        elif found and found["tag"] not in NET_OWN_TAGS:
            self.log.net_tags.add(found["tag"])

    def _message(self, msg: str, pid: int) -> None:
        for guard, pattern, handler in self.handlers:
            if guard in msg:  # a literal every match contains: skips the regex for the other lines
                found = pattern.match(msg)
                if found:
                    handler(found, pid)
                    return

    def _handlers(self) -> tuple:
        """(guard, pattern, handler) in matching order; the first match wins. The guard is a
        substring of every line the pattern matches (a plain `in` test, far cheaper than a match)."""
        return (
            ("NCCL version", _VERSION, lambda m, pid: self._version(m)),
            ("RCCL version", _RCCL_VERSION, lambda m, pid: self._version(m, "RCCL")),
            (" set by environment", _SET_BY_ENV, lambda m, pid: self._env(m["var"], m["value"])),
            (" Bytes -> Algo ", _TUNING, self._tuning),
            (" via ", _CONNECTION, lambda m, pid: self._connection(m["via"])),
            ("Channel ", _RING, lambda m, pid: self._count(self.ring_counts, int(m["n"]))),
            ("Trees", _TREES, lambda m, pid: self._trees(m[1])),
            (" - Init ", _COMM_INIT, self._comm),
            (" nRanks ", _COMM_SHAPE, self._comm),
            (
                "[Symmetric]",
                _SYMMETRIC,
                lambda m, pid: self.log.symmetric_kernels.append(
                    {"collective": m["coll"], "bytes": int(m["bytes"]), "kernel": m["kernel"]}
                ),
            ),
            (" opCount ", _CALL, lambda m, pid: self._count(self.calls, m["coll"])),
            ("Connected all ", _CONNECTED, lambda m, pid: self._count(self.connected, m["what"])),
            (
                " coll channels, ",
                _CHANNEL_COUNTS,
                lambda m, pid: self.log.channel_counts.update(
                    {k: int(v) for k, v in m.groupdict().items() if v is not None}
                ),
            ),
            ("tuner plugin", _TUNER, lambda m, pid: self._tuner(m)),
            ("Using network ", _NETWORK, lambda m, pid: self.log.networks.add(m["name"])),
            ("NET/Plugin", _NO_PLUGIN, lambda m, pid: self._no_plugin(m)),
            ("Enabled NCCL Func", _MATRIX_START, lambda m, pid: self._matrix_start()),
            (" -> ", _RETURN, lambda m, pid: self._return(m)),
        )

    @staticmethod
    def _count(counter: Counter, key: Hashable) -> None:
        counter[key] += 1  # Counter.update([key]) costs several isinstance calls per line

    def _bare(self, line: str, raw: str = "") -> None:
        """A line without NCCL's prefix: a version banner (NCCL's, RCCL's, vLLM's) or a test's
        failure line; a substring test first, as most such lines are the application's."""
        if "version" in line:
            text = _QUOTE.sub("", line.strip())
            for pattern, library in ((_VERSION, "NCCL"), (_RCCL_VERSION, "RCCL")):
                found = pattern.match(text)
                if found:
                    self._version(found, library)
        if "failure" in line and _TEST_FAILURE.search(line):
            self.log.failures.append(_QUOTE.sub("", line.strip()))
        elif "Test failure" in line and _TEST_TRACE.search(line):
            return  # where the failure above it passed through nccl-tests: part of it
        else:  # not read here: shown if it looks like a failure (`evidence.failure_lines`)
            self.log.failure_lines.offer(self.number, raw or line, self.source)  # verbatim

    def _return(self, m: re.Match) -> None:
        self._count(self.returns, m["file"])
        if m["why"]:
            self.log.return_errors.setdefault(m["file"], m["why"])

    def _no_plugin(self, m: re.Match) -> None:
        self.log.net_plugin_missing = self.log.net_plugin_missing or m.string

    def _version(
        self, match: re.Match, library: str | None = "NCCL", source: str = "banner"
    ) -> None:
        self.log.versions.add(match["v"])
        if library and self.log.library in (None, "NCCL"):
            self.log.library = library
        if self.log.nccl_version is None:
            self.log.nccl_version, self.log.nccl_version_full = match["v"], match["full"]
            self.log.version_source = source

    def _env(self, var: str, value: str) -> None:
        value = value.strip()
        if _INT_WITH_PERIOD.match(value):  # integer parameters are logged as "%lld."
            value = value[:-1]
        self.log.env.setdefault(var, value)
        seen = self.log.env_values.setdefault(var, [])
        if value not in seen:
            seen.append(value)

    def _tuning(self, m: re.Match, pid: int) -> None:
        channels = (int(m["lo"]), int(m["hi"])) if m["lo"] is not None else None
        self.log.tuning.append(
            TuningEntry(
                collective=m["coll"],
                bytes=int(m["bytes"]),
                algo=algo_name(m["algo"]),
                proto=proto_name(m["proto"]),
                channels=channels,
                predicted_time_us=float(m["time"]) if m["time"] else None,
                pid=pid,
            )
        )

    def _connection(self, via: str) -> None:
        via = via.strip()
        self._count(self.transports, via.split("/", 1)[0])
        self._count(
            self.details, re.sub(r"/[0-9]{1,19}(?=/|$)", "", via)
        )  # drop NET device indices

    def _comm(self, m: re.Match, pid: int) -> None:
        nranks = int(m["nranks"])
        self.log.nranks = max(self.log.nranks or 0, nranks)
        groups = m.groupdict()
        facts = {
            "pid": pid,
            "comm": m["comm"],
            "rank": int(m["rank"]),
            "nranks": nranks,
            "cuda_dev": int(groups["dev"]) if groups.get("dev") else None,
            "bus_id": groups.get("bus"),
            "nnodes": int(groups["nnodes"]) if groups.get("nnodes") else None,
        }
        known = self.comms.setdefault((pid, m["comm"], int(m["rank"])), facts)
        known.update({key: value for key, value in facts.items() if value is not None})
        if groups.get("phase"):  # `- Init START` / `- Init COMPLETE`: did this rank finish init?
            known["init_complete"] = known.get("init_complete") or groups["phase"] == "COMPLETE"

    def _trees(self, entries: str) -> None:
        self.log.tree_channels = max(self.log.tree_channels or 0, entries.count("["))

    def _tuner(self, m: re.Match) -> None:
        self.log.tuner_plugin = m["name"] or m["name2"] or "internal"

    def _matrix_start(self) -> None:
        self.matrix_header = []
        if self.log.enabled_matrix is None:
            self.log.enabled_matrix = {}

    def _matrix_line(self, line: str) -> bool:
        """Consume one line of the matrix that follows `Enabled NCCL Func/Proto/Algo Matrix:`."""
        row = _MATRIX_ROW.match(line)
        if row is None:
            self.matrix_header = None
            return not line.strip()  # the blank line that ends the matrix is consumed
        protos, algos = row["protos"].split(), row["algos"].split()
        if row["func"] == "Function":
            self.matrix_header = [protos, algos]
            return True
        header, matrix = self.matrix_header, self.log.enabled_matrix
        if header is None or len(header) != 2 or matrix is None:  # a row before the header
            self.matrix_header = None
            return False
        names_p, names_a = header
        matrix[row["func"]] = {
            "protocols": [proto_name(n) for n, v in zip(names_p, protos) if v != "0"],
            "algorithms": [algo_name(n) for n, v in zip(names_a, algos) if v != "0"],
        }
        return True

    def finish(self) -> NcclLog:
        log = self.log
        log.transports = dict(self.transports)
        log.transport_details = dict(self.details)
        log.calls = dict(self.calls)
        log.connected = dict(self.connected)
        log.returns = dict(self.returns)
        log.communicators = list(self.comms.values())
        if self.ring_counts:
            log.ring_channels = max(self.ring_counts)
        return log
