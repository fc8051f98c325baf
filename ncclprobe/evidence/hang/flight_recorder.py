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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.hang.safe_pickle import loads_data
from ncclprobe.numbers import ascii_re, parse_int
from ncclprobe.secrets import mask_setting, mask_text
from ncclprobe.sizes import MAX_SIZE
from ncclprobe.validate import MIB, Where, decode_text, gunzip, loads_json, read_bytes, shown

DUMP_LIMIT = 256 * MIB  # a 20,000-entry buffer with stack frames is tens of MB
DECOMPRESSED_LIMIT = DUMP_LIMIT  # gzipped, the same dump: the same limit (validate.gunzip)
MAX_ENTRIES = 1_000_000
NEWEST_READ = (2, 10)
STATES = ("scheduled", "started", "completed")
_RANK_IN_NAME = ascii_re(r"^(?P<prefix>.*?)(?P<rank>\d+)(?:\.(?:pkl|pickle|json))?(?:\.gz)?$")
_RANKS = ascii_re(r"^\[\s*(?:\d{1,9}(?:\s*,\s*\d{1,9})*)?\s*\]$")  # ranks: 9 digits at most
_P2P_NAME = ascii_re(r"^(?P<op>send|recv) (?P<a>\d{1,9})(?P<dir>->|<-)(?P<b>\d{1,9})$")
MAX_RANK = 10**9 - 1
# every string a dump holds is shown as the one policy shows text (frame file names, group
# descriptions, dtypes quote paths and URLs: a token in one is masked); the same few strings repeat
# in every entry of every rank, so each distinct one is masked once
_masked = lru_cache(maxsize=1 << 16)(mask_text)


@lru_cache(maxsize=1 << 12)
def _masked_id(text: str) -> str:
    """A group's name, which ranks are matched by: a digest where the policy would mask it, so two
    masked names stay two groups (`ncclprobe.secrets.mask_setting`'s rule)."""
    return mask_setting("group", text) if _masked(text) != text else text


@dataclass(frozen=True)
class Frame:
    name: str
    filename: str
    line: int | None


@dataclass(frozen=True)
class Entry:
    """One operation a rank's process group issued, as the Flight Recorder recorded it."""

    record_id: int | None
    pg_id: int | None
    group: str  # the group's name ("0" for the default group), or str(pg_id) before 2.0
    group_desc: str | None  # "default_pg", a user's `group_desc`; None before 2.0
    collective_seq: int | None  # collective_seq_id (seq_id before 2.0); 0 for p2p ops
    p2p_seq: int | None
    op_id: int | None
    backend: str  # the profiling name's prefix: nccl, gloo, ...
    op: str  # all_reduce, broadcast, send, recv, coalesced, ...
    src: int | None  # send/recv: group ranks from the profiling name ("send 0->1", "recv 1<-0")
    dst: int | None
    is_p2p: bool
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...] | None
    output_dtypes: tuple[str, ...] | None
    state: str  # scheduled | started | completed
    retired: bool | None  # retired but not completed: the watchdog gave up on it (timed out)
    time_created_ns: int | None
    time_started_ns: int | None
    time_completed_ns: int | None
    timeout_ms: int | None
    duration_ms: float | None
    frames: tuple[Frame, ...] = ()

    @property
    def numel_in(self) -> int:
        return sum(_numel(s) for s in self.input_sizes)

    @property
    def numel_out(self) -> int:
        return sum(_numel(s) for s in self.output_sizes)

    @property
    def where(self) -> str:
        """The user's own frame that issued it (the first outside torch), e.g. `train.py:42 step`."""
        for frame in self.frames:
            if "/torch/" not in frame.filename.replace("\\", "/"):
                return f"{frame.filename}:{frame.line} {frame.name}"
        return ""


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
    entries: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def version_tuple(self) -> tuple[int, int]:
        major, _, minor = self.version.partition(".")
        return int(major), int(minor)


def read_flight_recorder(paths) -> list[Dump]:
    """Every dump under `paths` (files, or directories holding one dump per rank), by rank."""
    dumps: dict[int, Dump] = {}
    for path in paths:
        for file in _dump_files(Path(path)):
            dump = read_dump(file)
            if dump.rank in dumps:
                raise UsageProblem(
                    f"two Flight Recorder dumps of rank {dump.rank}: {dumps[dump.rank].path!r} and "
                    f"{dump.path!r} (give one job's dumps, one per rank)"
                )
            dumps[dump.rank] = dump
    return [dumps[r] for r in sorted(dumps)]


def _dump_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    found = [
        p
        for p in sorted(path.iterdir())
        if p.is_file() and _RANK_IN_NAME.match(p.name) and _looks_like_dump(p)
    ]
    if not found:
        raise UsageProblem(
            f"no Flight Recorder dump in {str(path)!r}: torch writes one per rank as "
            "<TORCH_FR_DUMP_TEMP_FILE><rank> (default /tmp/nccl_trace_rank_<rank>)"
        )
    return found


def _looks_like_dump(path: Path) -> bool:
    """A pickle (protocol 2+), gzip or JSON object start: the other files of a folder are skipped."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(2)
    except OSError:
        return False
    return head[:1] in (b"\x80", b"{") or head == b"\x1f\x8b"


def read_dump(path: str | Path) -> Dump:
    """One rank's dump; anything but a Flight Recorder dump is a UsageProblem naming the file."""
    path = Path(path)
    match = _RANK_IN_NAME.match(path.name)
    if not match:
        raise UsageProblem(
            f"cannot tell which rank wrote {str(path)!r}: torch names a dump <prefix><rank> "
            "(nccl_trace_rank_0); keep the rank at the end of the name"
        )
    label = f"Flight Recorder dump {str(path)!r}"
    data = read_bytes(path, "Flight Recorder dump", limit=DUMP_LIMIT)
    if data[:2] == b"\x1f\x8b":
        data = gunzip(data, label, DECOMPRESSED_LIMIT)
    if not data.strip():
        raise UsageProblem(f"{label} is empty")
    if data[:1] == b"\x80" or data.rstrip().endswith(
        b"."
    ):  # protocol 2+ starts so; every pickle ends so
        doc, fmt = loads_data(data, label), "pickle"
    elif data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[") or data[:2] in (
        b"\xff\xfe",
        b"\xfe\xff",
    ):
        doc, fmt = (
            loads_json(decode_text(data, path, "Flight Recorder dump", errors="strict"), label),
            "json",
        )
    else:
        raise UsageProblem(f"{label} is neither a pickle nor JSON: not a Flight Recorder dump")
    return _parse(doc, Where(str(path)), int(match["rank"]), fmt)


def _parse(doc, where: Where, rank: int, fmt: str) -> Dump:
    doc = where.object(doc, "a Flight Recorder dump (a dict with version and entries)")
    if "version" not in doc or not ("entries" in doc or "pg_config" in doc):
        raise where.fail("not a Flight Recorder dump: no version, entries or pg_config")
    version = where.field(doc, "version", "str")
    if not re.fullmatch(r"[0-9]{1,3}\.[0-9]{1,3}", version):
        raise where.fail(f'field "version" must look like "2.10", got {version!r}')
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
    dump.comm_lib_version = _masked(version_text) if version_text else version_text
    dump.groups = _groups(doc.get("pg_config"), where.at("pg_config"), major)
    dump.status = _status(doc.get("pg_status"), where.at("pg_status"))
    entries = where.field(doc, "entries", "list", required=fmt == "pickle" and major >= 2)
    if entries and len(entries) > MAX_ENTRIES:
        raise where.fail(f"more than {MAX_ENTRIES:,} entries (limit)")
    dump.entries = [
        _entry(e, where.at("entries").at(i), major) for i, e in enumerate(entries or [])
    ]
    return dump


def _lib_version(doc: dict, where: Where) -> str | None:
    for name in ("comm_lib_version", "nccl_version"):
        value = where.field(doc, name, "str", required=False, nullable=True)
        if value:
            return value
    return None


def _groups(value, where: Where, major: int) -> dict[str, GroupConfig]:
    if value is None:
        return {}
    value = where.object(value, "an object of process groups")
    groups = {}
    for key, info in value.items():
        key = _key(key, where)
        if major < 2:  # 1.4: pg_id -> [ranks]
            ranks = _int_list(info, where.at(str(key)))
            groups[str(key)] = GroupConfig(name=str(key), desc=None, ranks=ranks)
            continue
        at = where.at(str(key))
        info = at.object(info, "a group's {name, desc, ranks}")
        name = at.field(info, "name", "str", required=False, default=str(key))
        desc = at.field(info, "desc", "str", required=False, nullable=True)
        ranks = at.field(info, "ranks", "str", required=False, default="[]")
        if not _RANKS.match(ranks):
            raise at.fail(
                f'field "ranks" must be a list of ranks like "[0, 1]", got {ranks[:80]!r}'
            )
        numbers = tuple(int(r) for r in re.findall(r"\d+", ranks))
        name = _masked_id(name or str(key))
        groups[name] = GroupConfig(name=name, desc=_masked(desc) if desc else desc, ranks=numbers)
    return groups


def _key(key, where: Where) -> str:
    """A dict key as text: a string, or a group id a pickle keyed by int (at most 64 bits: `str()`
    of 4,300 digits raises, and no group id is that long)."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool) and abs(key) < 2**63:
        return str(key)
    raise where.fail(f"a key must be a string or a group id, got {shown(key)}")


def _int_list(value, where: Where) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_RANK for v in value
    ):
        raise where.fail("must be a list of ranks")
    return tuple(value)


def _status(value, where: Where) -> dict[int, GroupStatus]:
    if value is None:
        return {}
    value = where.object(value, "an object of group states")
    out = {}
    for key, info in value.items():
        key = _key(key, where)
        at = where.at(key)
        pg_id = parse_int(key, f"{where} key", min=0)
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
        return parse_int(value, f'{where} field "{name}"', min=-1)
    return where.field({name: value}, name, "int", min=-1)


def _entry(raw, where: Where, major: int) -> Entry:
    e = where.object(raw, "an entry (a dict)")
    name = where.field(e, "profiling_name", "str")
    backend, _, op_text = name.partition(":")
    op, src, dst = _op(op_text or backend)
    pg = e.get("process_group")
    if major >= 2 and pg is not None:
        if not (
            isinstance(pg, (list, tuple)) and len(pg) == 2 and all(isinstance(p, str) for p in pg)
        ):
            raise where.fail('field "process_group" must be (name, desc)')
        group, desc = pg
    else:
        group, desc = str(where.field(e, "pg_id", "int", required=False, default="?")), None
    seq_name = "collective_seq_id" if major >= 2 else "seq_id"
    opt = lambda n, kind="int": where.field(e, n, kind, required=False, nullable=True)  # noqa: E731
    is_p2p = opt("is_p2p", "bool")
    return Entry(
        record_id=opt("record_id"),
        pg_id=opt("pg_id"),
        group=_masked_id(group),
        group_desc=_masked(desc) if desc else desc,
        collective_seq=opt(seq_name),
        p2p_seq=opt("p2p_seq_id"),
        op_id=opt("op_id"),
        backend=backend if op_text else "",
        op=op,
        src=src,
        dst=dst,
        is_p2p=bool(is_p2p) if is_p2p is not None else op in ("send", "recv"),
        input_sizes=_sizes(e, "input_sizes", where),
        output_sizes=_sizes(e, "output_sizes", where),
        input_dtypes=_strings(e, "input_dtypes", where),
        output_dtypes=_strings(e, "output_dtypes", where),
        state=where.field(e, "state", "str", choices=STATES),
        retired=opt("retired", "bool"),
        time_created_ns=opt("time_created_ns"),
        time_started_ns=opt("time_discovered_started_ns") or None,  # JSON writes 0 for unset
        time_completed_ns=opt("time_discovered_completed_ns") or None,
        timeout_ms=opt("timeout_ms"),
        duration_ms=opt("duration_ms", "number"),
        frames=_frames(e.get("frames"), where.at("frames")),
    )


def _op(text: str) -> tuple[str, int | None, int | None]:
    """`all_reduce` -> (all_reduce, None, None); `send 0->1` -> (send, 0, 1); `recv 1<-0` -> (recv, 0, 1)."""
    p2p = _P2P_NAME.match(text)
    if p2p is None:
        return text.split(" ", 1)[0], None, None
    a, b = int(p2p["a"]), int(p2p["b"])
    return (p2p["op"], a, b) if p2p["dir"] == "->" else (p2p["op"], b, a)


def _sizes(e: dict, name: str, where: Where) -> tuple[tuple[int, ...], ...]:
    value = e.get(name)
    if value is None:
        return ()
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(dims, (list, tuple))
        and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_SIZE for d in dims)
        for dims in value
    )
    if not ok:
        raise where.fail(f'field "{name}" must be a list of tensor shapes, got {shown(value)}')
    return tuple(tuple(dims) for dims in value)


def _strings(e: dict, name: str, where: Where) -> tuple[str, ...] | None:
    value = e.get(name)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise where.fail(f'field "{name}" must be a list of strings')
    return tuple(_masked(v) for v in value)


def _frames(value, where: Where) -> tuple[Frame, ...]:
    if not value:
        return ()
    if not isinstance(value, (list, tuple)):
        raise where.fail("must be a list of frames")
    frames = []
    for i, f in enumerate(value):
        at = where.at(i)
        f = at.object(f, "a frame {name, filename, line}")
        frames.append(
            Frame(
                name=_masked(at.field(f, "name", "str", required=False, default="")),
                filename=_masked(at.field(f, "filename", "str", required=False, default="")),
                line=at.field(f, "line", "int", required=False, nullable=True),
            )
        )
    return tuple(frames)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
