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

This module is the format and its reading (the vocabulary, the typed record, the validating
reader every command shares); writing a file, and that cut, live in `ncclprobe.records_writer`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ncclprobe.errors import UsageProblem
from ncclprobe.secrets import mask_provenance, mask_record, mask_setting
from ncclprobe.sizes import MAX_SIZE
from ncclprobe.stats import IterationStats
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


@dataclass
class ResultsFile:
    """A parsed results file: its header and records by type. A torn last line is dropped."""

    path: str
    header: dict
    configs: list[dict] = field(default_factory=list)
    results: list[ResultRecord] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class CostSplit:
    """The record's `cost_split` (docs/METRICS.md, `ncclprobe.sweep.cost_split`): what part of an
    eager call is NCCL's own and what the path adds, each variant's timing kept in `variants`."""

    nccl_us: float | None = None
    path_us: float | None = None
    events_us: float | None = None
    torch_dispatch_us: float | None = None
    variants: dict[str, dict[str, float]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict) -> CostSplit:
        return cls(
            nccl_us=doc.get("nccl_us"),
            path_us=doc.get("path_us"),
            events_us=doc.get("events_us"),
            torch_dispatch_us=doc.get("torch_dispatch_us"),
            variants=doc.get("variants") or {},
            refused=doc.get("refused") or {},
        )

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True)
class ResultRecord:
    """One result record, typed: what the sweep writes (`to_record`) and every reader reads
    (`read_results`).

    Built by the sweep, or from a record `read_results` validated, so every field has the kind the
    schema says; a field the record leaves out is None (`mode`: eager, as every writer before modes
    measured). The fields are in the order the sweep writes them, and `to_record` keeps that order,
    so a file stays byte for byte what it was when results were dicts: do not reorder them."""

    config_id: str
    settings: dict[str, str] = field(default_factory=dict)
    collective: str | None = None
    op: str | None = None
    mode: str = "eager"
    in_place: bool | None = None
    dtype: str | None = None
    size_bytes: int
    count: int | None = None
    root: int | None = None
    nranks: int | None = None
    status: Status | None = None
    reason: str | None = None
    time_us: float | None = None
    # what a measurement that ran reports (`_MEASURED`: left out of a record without a time)
    time_us_p10: float | None = None
    time_us_p90: float | None = None
    rank_spread_us: float | None = None
    trials: int | None = None
    iter: IterationStats | None = None
    cpu_issue_us: float | None = None
    cost_split: CostSplit | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    wrong: int | None = None
    checked: bool | None = None
    agg: int | None = None
    path: str | None = None  # torch | nccl (the sweep's --path), nccl-tests
    issued_by: str | None = None  # what issued the raw path's eager calls (sweep.cost_split)
    issued_by_why: str | None = None
    buffers: str | None = None  # rotate | reuse
    source: str | None = None  # sweep | nccl-tests
    # other writers' fields (`_WHEN_SET`: written only when set): nccl-tests' names of op and iters
    redop: str | None = None
    iters: int | None = None
    extra: dict = field(default_factory=dict)  # fields this version does not know, kept as read

    @classmethod
    def from_record(cls, record: dict) -> ResultRecord:
        values = {name: record[name] for name in _FIELDS if name in record}
        status, it, split = record.get("status"), record.get("iter"), record.get("cost_split")
        values.update(
            settings=dict(record.get("settings") or {}),  # validated: a str-map
            mode=record.get("mode") or "eager",
            status=Status(status) if status is not None else None,
            iter=IterationStats.from_json(it) if isinstance(it, dict) else None,
            cost_split=CostSplit.from_json(split) if isinstance(split, dict) else None,
        )
        extra = {k: v for k, v in record.items() if k not in _FIELDS and k != "record"}
        return cls(**values, extra=extra)

    def to_record(self) -> dict:
        """The record as the sweep writes it: every field in order, those of a measurement only
        where one ran (an error's record has no p10 or bandwidth), other writers' only where set."""
        out: dict = {"record": "result"}
        for name in _FIELDS:
            value = getattr(self, name)
            if value is None and (
                name in _WHEN_SET or (name in _MEASURED and self.time_us is None)
            ):
                continue
            out[name] = value.to_json() if isinstance(value, IterationStats | CostSplit) else value
        out.update(self.extra)
        return out

    @property
    def measured(self) -> bool:
        """Measured fine: status ok and a time (what a comparison may use)."""
        return self.status is Status.OK and self.time_us is not None

    @property
    def timed_us(self) -> float:
        """`time_us` of a record that has one (the `measured` ones comparisons use); asking it of
        a record without a time is the caller's mistake."""
        if self.time_us is None:
            raise ValueError(f"result {self.config_id} at {self.size_bytes} bytes has no time")
        return self.time_us


_FIELDS = tuple(f.name for f in fields(ResultRecord) if f.name != "extra")
_MEASURED = frozenset(
    (
        "time_us_p10",
        "time_us_p90",
        "rank_spread_us",
        "trials",
        "iter",
        "cpu_issue_us",
        "algbw_gbps",
        "busbw_gbps",
        "issued_by",
        "issued_by_why",
    )
)
_WHEN_SET = frozenset(("redop", "iters"))


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
    buckets = {"config": out.configs, "summary": out.summaries}
    for _number, record in records[1:]:
        record = _masked(record)
        if record.get("record") == "result":
            out.results.append(ResultRecord.from_record(record))
        elif record.get("record") in buckets:  # other kinds: newer writers' records
            buckets[record["record"]].append(record)
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
    if kind == "result":
        for part, nested in _NESTED.items():
            if isinstance(record.get(part), dict):
                for name, field_kind, limits in nested:
                    where.at(part).field(record[part], name, field_kind, **limits)


_OPTIONAL: dict[str, Any] = {"required": False, "nullable": True}
_Check = tuple[str, str, dict[str, Any]]  # field, kind, Where.field's limits
_SCHEMA: dict[str, tuple[_Check, ...]] = {
    "header": (
        ("kind", "str", {}),
        ("nranks", "int", {**_OPTIONAL, "min": 1}),
        ("backend", "str", _OPTIONAL),
        ("topology", "dict", _OPTIONAL),
        ("versions", "dict", _OPTIONAL),
        ("spec", "dict", _OPTIONAL),
        ("notes", "list", _OPTIONAL),
        ("gpus", "list", _OPTIONAL),
        ("env", "dict", _OPTIONAL),  # then every value a string (validate_record)
        ("argv", "list", _OPTIONAL),
        ("node", "dict", _OPTIONAL),
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
        ("op", "str", _OPTIONAL),
        ("root", "int", _OPTIONAL),
        ("rank_spread_us", "number", {**_OPTIONAL, "min": 0}),
        ("iter", "dict", _OPTIONAL),
        ("cpu_issue_us", "number", _OPTIONAL),
        ("cost_split", "dict", _OPTIONAL),
        ("checked", "bool", _OPTIONAL),
        ("agg", "int", {**_OPTIONAL, "min": 1}),
        ("path", "str", _OPTIONAL),
        ("issued_by", "str", _OPTIONAL),
        ("issued_by_why", "str", _OPTIONAL),
        ("buffers", "str", _OPTIONAL),
        ("source", "str", _OPTIONAL),
        ("redop", "str", _OPTIONAL),
        ("iters", "int", {**_OPTIONAL, "min": 0}),
    ),
    "summary": (),
}
# The parts of a result's `iter` and `cost_split` that readers use (the typed record's fields).
_NESTED: dict[str, tuple[_Check, ...]] = {
    "iter": (
        *((name, "number", _OPTIONAL) for name in ("min_us", "p50_us", "p95_us", "p99_us")),
        *((name, "number", _OPTIONAL) for name in ("max_us", "mean_us", "cv_pct")),
        ("samples", "int", {**_OPTIONAL, "min": 0}),
        ("clock", "str", _OPTIONAL),
    ),
    "cost_split": (
        *((name, "number", _OPTIONAL) for name in ("nccl_us", "path_us", "events_us")),
        ("torch_dispatch_us", "number", _OPTIONAL),
        ("variants", "dict", _OPTIONAL),
        ("refused", "str-map", _OPTIONAL),
    ),
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


# The record's `cost_split` (docs/METRICS.md): the four ways an eager NCCL row is timed, by path and
# whether a CUDA event is recorded per iteration; the worker measures them, the parent aggregates them.
COST_SPLIT_VARIANTS = (("nccl", False), ("nccl", True), ("torch", False), ("torch", True))


def cost_split_variant(path: str, events: bool) -> str:
    return path + ("+events" if events else "")
