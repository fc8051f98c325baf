"""Read PyTorch Flight Recorder dumps (one file per rank, pickle or JSON) into typed records.

The Flight Recorder is a ring buffer of every collective and p2p operation a process group issued
(`TORCH_FR_BUFFER_SIZE=N`, older `TORCH_NCCL_TRACE_BUFFER_SIZE`); torch writes it per rank to
`<TORCH_FR_DUMP_TEMP_FILE><rank>` (older `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`, default
`/tmp/nccl_trace_rank_`) on a watchdog timeout (`TORCH_NCCL_DUMP_ON_TIMEOUT=1`) or when asked
(`torch._C._distributed_c10d._dump_nccl_trace()`, `_dump_fr_trace()`; the `_json` twins). The dump
does not say which rank wrote it: the file name does, as for PyTorch's own analyzer.

Schema versions, read from torch's writer (`TraceUtils.h` / `NCCLUtils.hpp` /
`FlightRecorder.hpp`/`FlightRecorderDetail.hpp` at their versions) and its analyzer
(`torch/distributed/flight_recorder/components`, torch 2.13):
- 1.x (torch 2.2-2.3; 1.1 and 1.4 read): entries with `record_id` (1.4), `pg_id`, `seq_id`,
  `op_id` (1.4), `profiling_name`, `time_created_ns`, `duration_ms` (with TORCH_NCCL_ENABLE_TIMING),
  `input_sizes`, `output_sizes`, `state`, `time_discovered_started_ns`,
  `time_discovered_completed_ns`, `retired`, `frames`; `pg_config` (1.4) maps pg_id (int) to a list
  of ranks; `nccl_comm_state` (NCCLX only). No group names, dtypes, timeouts or p2p counter.
- 2.0-2.2 (torch 2.4): `seq_id` split into `collective_seq_id` and `p2p_seq_id`; entries add
  `process_group` (name, desc), `input_dtypes`, `output_dtypes`, `timeout_ms`, `is_p2p`; `pg_config`
  maps a group name to {name, desc, ranks: the string "[0, 1]"}.
- 2.3: `pg_status` per pg_id (a string key): last enqueued, started and completed collective seq.
- 2.4: all_to_all sizes recorded (the analyzer checks them from 2.4 on).
- 2.7 (through 2.9): `nccl_version`; non-p2p coalesced collectives get entries too.
- 2.10 (torch 2.11-2.13): `comm_lib_version` instead of `nccl_version`; entries add `thread_id`,
  `thread_name`. gloo groups record too (torch 2.13), but leave `state` at "scheduled" and
  `pg_status.last_started_collective` at -1, and record no send/recv.
JSON dumps (`_dump_*_json`) hold the same fields; there `pg_status` values are strings, an unset
`time_discovered_*` is 0 instead of null, `process_group` is a list, `frames` are absent, and
`entries` is left out when empty. Fields a version lacks are None here; unknown fields are
ignored, so a newer 2.x reads (with a note); a major version above 2 changed existing fields and
is refused.

Reading a job (`read_flight_recorder`): every dump is read in a reader worker
(`evidence.read_pool`), under a memory and CPU cap sized from the file, and reduced there to its
`EntryTable` (`fr_table`): the parent holds ranks x entries as columns, never the dumps. A folder's
dumps are the files whose names end in a rank and share the dumps' prefix; its other files (logs,
NCCL's, scenario notes) are skipped and counted. A dump that is there but unreadable (empty, NUL
bytes, not a dump, refused) is named with why in `DumpList.unreadable`, and the job is read without
it: missing dumps are normal at 1,000 ranks. A file named on the command line is read or refused.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.hang.fr_entries import entry, fast_entry, masked, masked_id
from ncclprobe.evidence.hang.fr_table import STATES, Entries, Entry, EntryTable
from ncclprobe.evidence.hang.safe_pickle import Budget, loads_data
from ncclprobe.evidence.read_pool import MIB, Failed, Limits, map_files
from ncclprobe.numbers import ascii_re, parse_int
from ncclprobe.validate import (
    Where,
    decode_text,
    limit_of,
    loads_json,
    open_input,
    read_bytes,
    too_large,
)

# About 260 bytes an entry at six frames (torch's writer memoizes strings, not containers): a
# 2,000-entry buffer is 0.5 MB, a 20,000-entry one with 60-frame stacks about 30 MB.
DUMP_LIMIT = 64 * MIB
DECOMPRESSED_LIMIT = DUMP_LIMIT  # gzipped, the same dump: the same limit
GZIP_RATIO = 20  # real dumps compress 5-10x (NCCL with frames 5x, gloo without 9.5x)
GZIP_FLOOR = 4 * MIB  # a small file may expand past the ratio up to this
MAX_ENTRIES = 1_000_000
MEMORY_BASE = 96 * MIB  # a reader worker's budget: this plus
MEMORY_PER_BYTE = 12  # times the decompressed size (the loaded objects are about 10x it)
CPU_BASE_S = 1  # a reader worker's CPU seconds for a dump: this plus (a 2,000-entry dump: 0.02 s)
CPU_PER_S = 8 * MIB  # a second per this many decompressed bytes
NEWEST_READ = (2, 10)
_RANK_IN_NAME = ascii_re(r"^(?P<prefix>.*?)(?P<rank>\d{1,9})(?:\.(?:pkl|pickle|json))?(?:\.gz)?$")
_RANKS = ascii_re(r"^\[\s*(?:\d{1,9}(?:\s*,\s*\d{1,9})*)?\s*\]$")
__all__ = ["Entry", "STATES"]


@dataclass(frozen=True)
class GroupConfig:
    name: str
    desc: str | None
    ranks: tuple[int, ...]  # global ranks; empty when the dump did not record them


@dataclass(frozen=True)
class GroupStatus:
    """pg_status (2.3+): how far this rank's group got, whatever the ring buffer still holds."""

    last_enqueued: int | None
    last_started: int | None  # -1: never seen started (gloo; NCCL without timing)
    last_completed: int | None


@dataclass
class Dump:
    path: str
    rank: int
    version: str
    format: str  # pickle | json
    comm_lib_version: str | None = None
    groups: dict[str, GroupConfig] = field(default_factory=dict)
    status: dict[int, GroupStatus] = field(default_factory=dict)  # by pg_id
    table: EntryTable = field(default_factory=EntryTable)
    notes: list[str] = field(default_factory=list)

    @property
    def entries(self) -> Entries:
        """Every entry, in record order, each built when asked for (see `fr_table`)."""
        return Entries(self.table)

    @property
    def version_tuple(self) -> tuple[int, int]:
        major, _, minor = self.version.partition(".")
        return int(major), int(minor)


class DumpList(list):
    """The dumps read, by rank; beside them the rank files that could not be read (rank -> (path,
    why)) and how many other files of the folders were skipped."""

    def __init__(self, dumps=(), unreadable=None, skipped=0):
        super().__init__(dumps)
        self.unreadable: dict[int, tuple[str, str]] = dict(unreadable or {})
        self.skipped = skipped


@dataclass(frozen=True)
class Caps:
    """The limits one reading works under (the module's, when the read began)."""

    dump: int
    decompressed: int
    ratio: int
    entries: int

    @classmethod
    def now(cls) -> Caps:
        return cls(limit_of(DUMP_LIMIT), limit_of(DECOMPRESSED_LIMIT), GZIP_RATIO, MAX_ENTRIES)


def read_flight_recorder(paths) -> DumpList:
    """Every dump under `paths` (files, or folders holding one dump per rank), by rank, each read
    in a capped worker; see the module docstring for folders and unreadable rank files."""
    files, from_folder, skipped = [], set(), 0
    for path in map(Path, paths):
        if path.is_dir():
            found, others = _dump_files(path)
            files += found
            from_folder.update(found)
            skipped += others
        else:
            files.append(path)
    caps = Caps.now()
    outcomes = map_files(_read_reduced, [(f, caps) for f in files], _limits)
    dumps: dict[int, Dump] = {}
    unreadable: dict[int, tuple[str, str]] = {}
    for file, outcome in zip(files, outcomes):
        if isinstance(outcome, Failed):
            if file not in from_folder:
                problem = outcome.problem
                if str(file) not in problem:
                    problem = f"Flight Recorder dump {str(file)!r}: {problem}"
                raise UsageProblem(problem)
            unreadable[_rank_of(file)] = (str(file), _why(outcome.problem, file))
            continue
        dump = outcome.value
        if dump.rank in dumps:
            raise UsageProblem(
                f"two Flight Recorder dumps of rank {dump.rank}: {dumps[dump.rank].path!r} and "
                f"{dump.path!r} (give one job's dumps, one per rank)"
            )
        dumps[dump.rank] = dump
    if not dumps and unreadable:
        _, (name, why) = next(iter(sorted(unreadable.items())))
        more = f" (and {len(unreadable) - 1} more rank files)" if len(unreadable) > 1 else ""
        raise UsageProblem(f"no readable Flight Recorder dump: {name!r}: {why}{more}")
    for rank in set(unreadable) & set(dumps):
        del unreadable[rank]  # another file of that rank was read
    return DumpList([dumps[r] for r in sorted(dumps)], unreadable, skipped)


def _why(problem: str, file: Path) -> str:
    """A refusal without the file's name, which the caller prints beside it."""
    for lead in (f"Flight Recorder dump {str(file)!r}", f"{str(file)!r}"):
        if problem.startswith(lead):
            return problem[len(lead) :].lstrip(": ") or problem
    return problem


def _rank_of(path: Path) -> int:
    """The rank in a folder's rank file's name (`_dump_files` keeps only names that have one)."""
    named = _RANK_IN_NAME.match(path.name)
    if named is None:
        raise ValueError(f"{path.name!r} is no rank file's name")
    return int(named["rank"])


def _limits(item) -> Limits:
    """A worker's caps for one file, from its size: a gzip counts as what it may expand to."""
    path, caps = item
    try:  # a regular file only, opened without blocking (a FIFO's open() never returns)
        with open_input(path, "Flight Recorder dump") as handle:
            size = os.fstat(handle.fileno()).st_size
            gz = handle.read(2) == b"\x1f\x8b"
    except (OSError, UsageProblem):  # the worker's reading refuses it in its own words
        size, gz = 0, False
    if gz:
        size = max(GZIP_FLOOR, size * caps.ratio)
    size = min(size, caps.decompressed if gz else caps.dump)
    return Limits(
        memory_bytes=MEMORY_BASE + MEMORY_PER_BYTE * size, cpu_s=CPU_BASE_S + size // CPU_PER_S
    )


def _read_reduced(item) -> Dump:
    path, caps = item
    return read_dump(path, caps)


def _dump_files(path: Path) -> tuple[list[Path], int]:
    """A folder's rank files (named <prefix><rank>, the prefix the dumps share) and how many other
    files it holds. A file with the dumps' prefix is a rank file whatever it holds: if it cannot be
    read, it is named, not skipped."""
    named = {
        p: m["prefix"]
        for p in sorted(path.iterdir())
        if (m := _RANK_IN_NAME.match(p.name)) and _regular(p)
    }
    dumps = [p for p in named if _looks_like_dump(p)]
    prefixes = {named[p] for p in dumps or named}
    if not dumps and named:  # none reads as a dump: the rank files are those of the common prefix
        common = list(named.values())
        prefixes = {max(set(common), key=common.count)}
    if not prefixes:
        raise UsageProblem(
            f"no Flight Recorder dump in {str(path)!r}: torch writes one per rank as "
            "<TORCH_FR_DUMP_TEMP_FILE><rank> (default /tmp/nccl_trace_rank_<rank>)"
        )
    found = [p for p in named if p in dumps or named[p] in prefixes]
    others = sum(1 for p in path.iterdir()) - len(found)
    return found, others


def _regular(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _looks_like_dump(path: Path) -> bool:
    """A pickle (protocol 2+), gzip or JSON object start."""
    try:
        with open_input(path, "") as handle:
            head = handle.read(2)
    except (OSError, UsageProblem):
        return False
    return head[:1] in (b"\x80", b"{") or head == b"\x1f\x8b"


def read_dump(path: str | Path, caps: Caps | None = None) -> Dump:
    """One rank's dump, reduced to its table; anything but a Flight Recorder dump is a
    UsageProblem naming the file. Read here, in this process: `read_flight_recorder` reads in
    capped workers, which a file from someone else's job needs (see safe_pickle)."""
    caps = caps or Caps.now()
    path = Path(path)
    match = _RANK_IN_NAME.match(path.name)
    if not match:
        raise UsageProblem(
            f"cannot tell which rank wrote {str(path)!r}: torch names a dump <prefix><rank> "
            "(nccl_trace_rank_0); keep the rank at the end of the name"
        )
    label = f"Flight Recorder dump {str(path)!r}"
    data = read_bytes(path, "Flight Recorder dump", limit=caps.dump)
    if data[:2] == b"\x1f\x8b":
        data = gunzip_capped(data, label, caps.decompressed, caps.ratio)
    if not data.strip(b" \t\r\n"):
        raise UsageProblem(f"{label} is empty")
    if data[:1] == b"\x80":  # protocol 2+ starts so
        doc, fmt = loads_data(data, label), "pickle"
    elif data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[") or data[:2] in (
        b"\xff\xfe",
        b"\xfe\xff",
    ):
        text = decode_text(data, path, "Flight Recorder dump", errors="strict")
        doc, fmt = loads_json(text, label), "json"
    elif data.rstrip().endswith(b"."):  # every pickle ends so; protocols 0 and 1 start anyhow
        doc, fmt = loads_data(data, label), "pickle"
    else:
        raise UsageProblem(f"{label} is neither a pickle nor JSON: not a Flight Recorder dump")
    budget = Budget(label, max(len(data), 1 << 16))
    return _parse(doc, Where(str(path)), int(match["rank"]), fmt, caps, budget)


def gunzip_capped(data: bytes, label: str, limit: int, ratio: int) -> bytes:
    """A gzip stream decompressed while streaming, refused as soon as it passes `limit` bytes or
    `ratio` times its own size (past a small floor): nothing is expanded beyond the cap."""
    cap = min(limit, max(GZIP_FLOOR, len(data) * ratio))
    out, total = [], 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
            while chunk := handle.read(min(MIB, cap + 1 - total)):
                out.append(chunk)
                total += len(chunk)
                if total > cap:
                    break
    except (OSError, EOFError, zlib.error) as exc:
        raise UsageProblem(f"{label} is not readable gzip: {exc}") from None
    if total > cap:
        if cap < limit:
            raise UsageProblem(
                f"{label} decompresses to more than {ratio}x its size ({cap // MIB} MiB): refused "
                "as a gzip bomb (real dumps compress 5-10x; gunzip it yourself to read it anyway)"
            )
        raise UsageProblem(too_large(label, limit, "decompresses to more than"))
    return b"".join(out)


def _parse(
    doc, where: Where, rank: int, fmt: str, caps: Caps | None = None, budget: Budget | None = None
) -> Dump:
    caps = caps or Caps.now()
    budget = budget or Budget(str(where), caps.dump)
    doc = where.object(doc, "a Flight Recorder dump (a dict with version and entries)")
    if "version" not in doc or not ("entries" in doc or "pg_config" in doc):
        raise where.fail("not a Flight Recorder dump: no version, entries or pg_config")
    version = where.field(doc, "version", "str")
    if not re.fullmatch(r"[0-9]{1,3}\.[0-9]{1,3}", version):
        raise where.fail(f'field "version" must look like "2.10", got {version[:20]!r}')
    dump = Dump(path=where.path, rank=rank, version=version, format=fmt)
    major, minor = dump.version_tuple
    if major > NEWEST_READ[0] or major < 1:
        raise where.fail(
            f"Flight Recorder version {version} changed existing fields; this reader knows 1.x "
            f"to {NEWEST_READ[0]}.{NEWEST_READ[1]}"
        )
    if (major, minor) > NEWEST_READ:
        dump.notes.append(
            f"rank {rank}: Flight Recorder version {version} is newer than {NEWEST_READ[0]}."
            f"{NEWEST_READ[1]}, the newest this reader was written for: fields added since are ignored"
        )
    version_text = _lib_version(doc, where)
    dump.comm_lib_version = masked(version_text) if version_text else version_text
    dump.groups = _groups(doc.get("pg_config"), where.at("pg_config"), major, budget)
    dump.status = _status(doc.get("pg_status"), where.at("pg_status"), budget)
    entries = where.field(doc, "entries", "list", required=fmt == "pickle" and major >= 2)
    if entries and len(entries) > caps.entries:
        raise where.fail(f"more than {caps.entries:,} entries (limit)")
    at = where.at("entries")
    budget.spend(len(entries or ()))
    for i, e in enumerate(entries or []):
        if not fast_entry(e, major, budget, dump.table):
            dump.table.add(entry(e, at.at(i), major, budget))
    dump.table.show_strings(masked_id, masked)
    return dump


def _lib_version(doc: dict, where: Where) -> str | None:
    for name in ("comm_lib_version", "nccl_version"):
        value = where.field(doc, name, "str", required=False, nullable=True)
        if value:
            return value
    return None


def _groups(value, where: Where, major: int, budget: Budget) -> dict[str, GroupConfig]:
    if value is None:
        return {}
    value = where.object(value, "an object of process groups")
    budget.spend(len(value))
    groups = {}
    for key, info in value.items():
        if not isinstance(key, (str, int)) or isinstance(key, bool) or _huge(key):
            raise where.fail("a process group's key must be its name or id")
        if major < 2:  # 1.4: pg_id -> [ranks]
            ranks = _int_list(info, where.at(str(key)), budget)
            groups[masked_id(str(key))] = GroupConfig(masked_id(str(key)), None, ranks)
            continue
        at = where.at(str(key))
        info = at.object(info, "a group's {name, desc, ranks}")
        name = at.field(info, "name", "str", required=False, default=str(key))
        desc = at.field(info, "desc", "str", required=False, nullable=True)
        ranks = at.field(info, "ranks", "str", required=False, default="[]")
        if len(ranks) > 16 * MAX_ENTRIES or not _RANKS.match(ranks):
            raise at.fail(
                f'field "ranks" must be a list of ranks like "[0, 1]", got {ranks[:80]!r}'
            )
        numbers = tuple(int(r) for r in re.findall(r"\d+", ranks))
        budget.spend(len(numbers))
        name = masked_id(name or str(key))
        groups[name] = GroupConfig(name=name, desc=masked(desc) if desc else desc, ranks=numbers)
    return groups


def _huge(key) -> bool:
    return isinstance(key, int) and abs(key) >= 2**63


def _int_list(value, where: Where, budget: Budget) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        budget.spend(len(value))
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 for v in value
    ):
        raise where.fail("must be a list of ranks")
    return tuple(value)


def _status(value, where: Where, budget: Budget) -> dict[int, GroupStatus]:
    if value is None:
        return {}
    value = where.object(value, "an object of group states")
    budget.spend(len(value))
    out = {}
    for key, info in value.items():
        if not isinstance(key, (str, int)) or isinstance(key, bool) or _huge(key):
            raise where.fail("a group state's key must be a pg_id")
        at = where.at(str(key))
        pg_id = parse_int(str(key)[:40], f"{where} key", min=0, max=2**63 - 1)
        info = at.object(info, "a group's last enqueued/started/completed")
        out[pg_id] = GroupStatus(
            *(
                _count(info.get(f"last_{n}_collective"), at, f"last_{n}_collective")
                for n in ("enqueued", "started", "completed")
            )
        )
    return out


def _count(value, where: Where, name: str) -> int | None:
    """An int, or its string (JSON dumps write pg_status values as strings)."""
    if value is None:
        return None
    if isinstance(value, str):
        return parse_int(value[:40], f'{where} field "{name}"', min=-1, max=2**63 - 1)
    return where.field({name: value}, name, "int", min=-1)
