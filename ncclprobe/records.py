"""The result-record format shared by the sweep, `ncclprobe import`, recommend, report and diagnose.

A results file is JSON Lines. The first line is a header; then one line per finished piece of
work, appended and fsynced as soon as it is known, so a killed run keeps everything it finished.

  {"record": "header", "schema_version": 1, "kind": "sweep"|"nccl-tests", "argv": [...],
   "started_at": ISO-8601, "hostname", "versions": {...}, "gpus": [...], "env": {NCCL_*/CUDA_*},
   "backend": "nccl"|"gloo", "nranks": n, ...}
  {"record": "config", "config_id": "...", "settings": {"NCCL_PROTO": "LL", ...}, "pool": k,
   "status": "ok"|"ignored"|"hang"|"error"|"wrong"|"skipped", "reason": str|null,
   "results_expected": int (the result records that follow it),
   "proof": {"seen_env": {...}, "set_by_environment": {...}, "tuning": [...], "verdicts": {...}}}
  {"record": "result", "config_id", "settings", "collective": "all_reduce", "mode": "eager"|"graph",
   "in_place": bool, "dtype": "float32", "size_bytes": int, "count": int, "nranks": int,
   "status": "ok"|"wrong"|"ignored"|"hang"|"error"|"skipped", "reason": str|null,
   "time_us": median, "time_us_p10", "time_us_p90", "algbw_gbps", "busbw_gbps",
   "wrong": int|null, "rank_spread_us": float|null, "trials": int, "source": "sweep"|"nccl-tests"}
  {"record": "summary", "wall_s": float, ...}

`settings` maps each NCCL variable the configuration sets to its value; a variable that is absent
is unset ("default"). The all-default configuration has `settings == {}`.

A sweep writes each configuration as one group: its config record, then its `results_expected`
result records. Only the tail group can be incomplete (a killed run); `trim_incomplete_tail` cuts
it off before --resume measures that configuration again, so a resumed file has no duplicates.
"""

from __future__ import annotations

import codecs
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.safe_output import (
    EXISTS,
    OutputProblem,
    check_appendable,
    commit_file,
    describe_os_error,
    dumps_json,
)
from ncclprobe.secrets import mask_provenance, mask_record, mask_setting
from ncclprobe.sizes import MAX_SIZE
from ncclprobe.textenum import TextEnum
from ncclprobe.validate import Where, decode_text, loads_json, read_bytes

SCHEMA_VERSION = 1


class Status(TextEnum):
    """A config's or a result's status."""

    OK = "ok"  # measured, and NCCL confirmed the settings (or there were none)
    WRONG = "wrong"  # the correctness pass found wrong elements
    IGNORED = "ignored"  # measured, but NCCL did not confirm every setting
    HANG = "hang"  # the pool went silent and was killed
    ERROR = "error"  # a rank failed, or the workers did not see the configuration
    SKIPPED = "skipped"  # measured as another configuration that connects the same pairs


RESULT_STATUSES = Status.values()
FINDING_STATUSES = (Status.WRONG, Status.HANG, Status.ERROR, Status.IGNORED)  # what fails a sweep


def config_id(settings: dict[str, str]) -> str:
    """A stable, readable id: `default`, or `NCCL_PROTO=LL,NCCL_P2P_LEVEL=SYS` in sorted order; a
    value the masking policy would not print whole is its digest (`mask_setting`), so the id, which
    tables, files and --resume repeat, never carries a credential typed into `--set`."""
    if not settings:
        return "default"
    return ",".join(f"{key}={mask_setting(key, settings[key])}" for key in sorted(settings))


def short_label(settings: dict[str, str]) -> str:
    """`PROTO=LL P2P_LEVEL=SYS` for tables and plots."""
    if not settings:
        return "default"
    return " ".join(
        f"{key.removeprefix('NCCL_')}={mask_setting(key, settings[key])}"
        for key in sorted(settings)
    )


class ResultWriter:
    """Append-only JSONL writer: every record is flushed and fsynced before `write` returns.

    Two ways to create a file, both following `ncclprobe.safe_output`'s rules:
      - a journal (the sweep): created at `path` at once, so a killed run keeps every finished
        configuration for --resume; an existing file is refused unless `force`; when the run fails
        before one configuration was recorded, the file goes (a bare header would only block the rerun);
      - `atomic=True` (import, collect): written beside `path` and renamed into place when closed
        cleanly; on any failure nothing is left.
    `resume=True` appends to an existing, writable results file.
    """

    def __init__(
        self,
        path: str | Path,
        header: dict | None,
        *,
        resume: bool = False,
        force: bool = False,
        atomic: bool = False,
    ):
        self.path, self.force, self.atomic = Path(path), force, atomic
        self.configs_written, self._temp, self._created = 0, None, False
        if resume:
            check_appendable(self.path, "results file")
            self._fh = self._open(lambda: open(self.path, "a", encoding="utf-8"))
            return
        if header is None:
            raise ValueError("a new results file needs a header")
        if atomic:
            fd, temp = self._open(
                lambda: tempfile.mkstemp(
                    dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
                )
            )
            self._temp, self._fh = Path(temp), os.fdopen(fd, "w", encoding="utf-8")
        else:
            if force and self.path.is_file():
                self.path.unlink()  # the user asked to replace it; everything was validated before
            self._fh = self._open(
                lambda: open(self.path, "x", encoding="utf-8")
            )  # never overwrite otherwise
            self._created = True
        try:
            self.write({"record": "header", "schema_version": SCHEMA_VERSION, **header})
        except BaseException:  # no `with` owns this writer yet: clean up here
            self.close(failed=True)
            raise

    def _open(self, opener):
        try:
            return opener()
        except FileExistsError:
            raise OutputProblem(
                f"results file {str(self.path)!r} {EXISTS} (or --resume it)"
            ) from None
        except OSError as exc:
            raise OutputProblem(describe_os_error(exc, self.path, "results file")) from None

    def write(self, record: dict) -> None:
        line = dumps_json(record, sort_keys=False, default=str) + "\n"
        try:
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            kept = (
                f"the {self.configs_written} configuration(s) recorded before are kept (--resume continues)"
                if self.configs_written and not self.atomic
                else "nothing was left behind"
            )
            raise OutputProblem(describe_os_error(exc, self.path, "results file", kept)) from None
        if record.get("record") == "config":
            self.configs_written += 1

    def close(self, failed: bool = False) -> None:
        try:
            self._fh.close()
        except OSError:
            failed = True
        if self._temp is not None:
            if failed:
                self._temp.unlink(missing_ok=True)
            else:
                commit_file(self._temp, self.path, self.force, "results file")
        elif failed and self._created and not self._holds_a_configuration():
            self.path.unlink(missing_ok=True)

    def _holds_a_configuration(self) -> bool:
        """Whether the journal recorded a configuration. The file decides, not the counter: an
        interrupt can land after a record reached the disk and before the counter moved."""
        if self.configs_written:
            return True
        try:
            lines = self.path.read_bytes().splitlines()
        except OSError:
            return False
        return any(
            line.startswith(b'{"record": "config"') and line.endswith(b"}") for line in lines[1:]
        )

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)


@dataclass
class ResultsFile:
    """A parsed results file: its header and records by type. A torn last line is dropped."""

    path: str
    header: dict
    configs: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)

    def result_records(self) -> list[ResultRecord]:
        """The result records, typed (the dicts stay for the writers, --resume and the tables)."""
        return [ResultRecord.from_record(r) for r in self.results]


@dataclass(frozen=True, kw_only=True)
class ResultRecord:
    """One result record, typed: what an analysis compares with (diagnose's bundle holds these).

    Built from a record `read_results` validated, so every field has the kind the schema says;
    a field the record leaves out is None (`mode`: eager, as every writer before modes measured)."""

    config_id: str
    size_bytes: int
    settings: dict[str, str] = field(default_factory=dict)
    collective: str | None = None
    mode: str = "eager"
    in_place: bool | None = None
    dtype: str | None = None
    op: str | None = None
    count: int | None = None
    nranks: int | None = None
    status: Status | None = None
    reason: str | None = None
    time_us: float | None = None
    time_us_p10: float | None = None
    time_us_p90: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    wrong: int | None = None
    trials: int | None = None
    source: str | None = None
    redop: str | None = None  # older writers' name of `op`

    @classmethod
    def from_record(cls, record: dict) -> ResultRecord:
        status = record.get("status")
        return cls(
            config_id=record["config_id"],
            size_bytes=int(record["size_bytes"]),
            settings={k: str(v) for k, v in (record.get("settings") or {}).items()},
            collective=record.get("collective"),
            mode=record.get("mode", "eager"),
            in_place=record.get("in_place"),
            dtype=record.get("dtype"),
            op=record.get("op"),
            count=record.get("count"),
            nranks=record.get("nranks"),
            status=Status(status) if status is not None else None,
            reason=record.get("reason"),
            time_us=record.get("time_us"),
            time_us_p10=record.get("time_us_p10"),
            time_us_p90=record.get("time_us_p90"),
            algbw_gbps=record.get("algbw_gbps"),
            busbw_gbps=record.get("busbw_gbps"),
            wrong=record.get("wrong"),
            trials=record.get("trials"),
            source=record.get("source"),
            redop=record.get("redop"),
        )

    @property
    def measured(self) -> bool:
        """Measured fine: status ok and a time (what a comparison may use)."""
        return self.status is Status.OK and self.time_us is not None


RESULTS_LIMIT = 2048 << 20  # a results file of a huge sweep is tens of MB; 2 GiB is not one


def read_results(path: str | Path) -> ResultsFile:
    """Read and validate a results file: its header, then every record against the schema above
    (`validate_record`). Anything wrong is a UsageProblem naming the file, the line and the field."""
    path = Path(path)
    text = decode_text(
        read_bytes(path, "results file", limit=RESULTS_LIMIT, text=True), path, "results file"
    )
    records = list(_parse_lines(text.splitlines(), path))
    if not records or records[0][1].get("record") != "header":
        raise UsageProblem(
            f"{str(path)!r} is not an ncclprobe results file (no header record on its first line)"
        )
    _, header = records[0]
    if header.get("schema_version") != SCHEMA_VERSION:
        raise UsageProblem(
            f"{str(path)!r} has schema version {header.get('schema_version')!r}; "
            f"this ncclprobe reads version {SCHEMA_VERSION}"
        )
    for number, record in records:
        validate_record(record, Where(str(path), number))
    out = ResultsFile(
        path=str(path), header=mask_provenance(header)
    )  # masked on read: ncclprobe.secrets
    buckets = {"header": [], "config": out.configs, "result": out.results, "summary": out.summaries}
    for _number, record in records[1:]:
        record = _masked(record)
        buckets.get(record.get("record"), []).append(record)  # other kinds: newer writers' records
    return out


def _masked(record: dict) -> dict:
    """A record as read, masked (`ncclprobe.secrets`): what each rank saw, and settings the policy
    would not print whole (another writer's file) as digests, its id recomputed from the same raw
    settings so a config and its results still match."""
    if record.get("record") == "config":
        record = mask_record(record)
    settings = record.get("settings")
    if record.get("record") not in ("config", "result") or not isinstance(settings, dict):
        return record
    masked = {str(k): mask_setting(str(k), str(v)) for k, v in settings.items()}
    if masked == settings:
        return record
    return {**record, "settings": masked, "config_id": config_id(settings)}


def validate_record(record: dict, where: Where) -> None:
    """Check the fields readers use (recommend, report, diagnose, --resume); fields this version
    does not know are left alone, so newer writers' additions still read."""
    kind = where.field(record, "record", "str")
    checks = _SCHEMA.get(kind, ())
    for name, field_kind, extra in checks:
        where.field(record, name, field_kind, **extra)
    if kind == "header" and isinstance(record.get("env"), dict):
        where.field(record, "env", "str-map")


_OPTIONAL = {"required": False, "nullable": True}
_SCHEMA = {
    "header": (
        ("kind", "str", {}),
        ("nranks", "int", {**_OPTIONAL, "min": 1}),
        ("backend", "str", _OPTIONAL),
        ("topology", "dict", _OPTIONAL),
        ("versions", "dict", _OPTIONAL),
        ("spec", "dict", _OPTIONAL),
        ("notes", "list", _OPTIONAL),
        ("gpus", "list", _OPTIONAL),
    ),
    "config": (
        ("config_id", "str", _OPTIONAL),
        ("settings", "str-map", _OPTIONAL),
        ("status", "str", {**_OPTIONAL, "choices": RESULT_STATUSES}),
        ("reason", "str", _OPTIONAL),
        ("results_expected", "int", {**_OPTIONAL, "min": 0}),
        ("proof", "dict", _OPTIONAL),
        ("pool", "int", {**_OPTIONAL, "min": 0}),
    ),
    "result": (
        ("config_id", "str", {}),
        ("settings", "str-map", _OPTIONAL),
        ("collective", "str", _OPTIONAL),
        ("mode", "str", _OPTIONAL),
        ("in_place", "bool", _OPTIONAL),
        ("dtype", "str", _OPTIONAL),
        ("size_bytes", "int", {"min": 0, "max": MAX_SIZE}),
        ("count", "int", {**_OPTIONAL, "min": 0, "max": MAX_SIZE}),
        ("nranks", "int", {**_OPTIONAL, "min": 1}),
        ("status", "str", {**_OPTIONAL, "choices": RESULT_STATUSES}),
        ("reason", "str", _OPTIONAL),
        ("time_us", "number", {**_OPTIONAL, "min": 0}),
        ("time_us_p10", "number", {**_OPTIONAL, "min": 0}),
        ("time_us_p90", "number", {**_OPTIONAL, "min": 0}),
        ("algbw_gbps", "number", _OPTIONAL),
        ("busbw_gbps", "number", _OPTIONAL),
        ("wrong", "int", {**_OPTIONAL, "min": 0}),
        ("trials", "int", {**_OPTIONAL, "min": 1}),
    ),
    "summary": (),
}


def _parse_lines(lines: list[str], path: Path) -> Iterator[tuple[int, dict]]:
    last = max((n for n, line in enumerate(lines, 1) if line.strip()), default=0)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError:
            if number == last:  # a write torn by a kill: everything before it is intact
                return
        except (ValueError, RecursionError):
            pass  # 5000 digits, nesting: loads_json below says so
        record = loads_json(line, f"{str(path)!r} line {number}")
        if not isinstance(record, dict):
            raise UsageProblem(f"{str(path)!r} line {number} is not a JSON object")
        yield number, record


def trim_incomplete_tail(path: str | Path) -> ResultsFile:
    """Cut a torn last line and an unfinished last configuration group off a results file."""
    path = Path(path)
    read_results(path)  # validates the header and schema first
    data = path.read_bytes()
    if b"\x00" in data[:65536] or data.startswith(
        codecs.BOM_UTF8
    ):  # read fine, but cut by bytes below
        raise UsageProblem(
            f"results file {str(path)!r} is not UTF-8 (as ncclprobe writes it); convert it to resume it"
        )
    keep = _complete_length(data)
    if keep < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
            os.fsync(fh.fileno())
    return read_results(path)


def _complete_length(data: bytes) -> int:
    """Bytes up to the end of the last complete configuration group (or non-config record)."""
    offset, keep, open_group = 0, 0, None  # open_group: [offset, results still expected]
    for line in data.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        try:
            record = json.loads(line) if line.endswith(b"\n") else None
        except (ValueError, RecursionError):  # torn, or no record (read_results says why)
            record = None
        if record is None:
            break
        if record.get("record") == "config":
            open_group = [start, int(record.get("results_expected", 0))]
        elif record.get("record") == "result" and open_group:
            open_group[1] -= 1
        if open_group is None or open_group[1] <= 0:
            keep, open_group = offset, None
    return keep


# The record's `cost_split` (docs/METRICS.md): the four ways an eager NCCL row is timed, by path and
# whether a CUDA event is recorded per iteration; the worker measures them, the parent aggregates them.
COST_SPLIT_VARIANTS = (("nccl", False), ("nccl", True), ("torch", False), ("torch", True))


def cost_split_variant(path: str, events: bool) -> str:
    return path + ("+events" if events else "")
