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

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from ncclprobe.errors import UsageProblem

SCHEMA_VERSION = 1
RESULT_STATUSES = ("ok", "wrong", "ignored", "hang", "error", "skipped")


def config_id(settings: dict[str, str]) -> str:
    """A stable, readable id: `default`, or `NCCL_PROTO=LL,NCCL_P2P_LEVEL=SYS` in sorted order."""
    if not settings:
        return "default"
    return ",".join(f"{key}={settings[key]}" for key in sorted(settings))


def short_label(settings: dict[str, str]) -> str:
    """`PROTO=LL P2P_LEVEL=SYS` for tables and plots."""
    if not settings:
        return "default"
    return " ".join(f"{key.removeprefix('NCCL_')}={settings[key]}" for key in sorted(settings))


def result_key(record: dict) -> tuple:
    """What identifies one measurement, for --resume."""
    return (record["config_id"], record.get("collective"), record.get("mode"), record.get("in_place"),
            record.get("dtype"), record.get("size_bytes"))


class ResultWriter:
    """Append-only JSONL writer: every record is flushed and fsynced before `write` returns."""

    def __init__(self, path: str | Path, header: dict | None, *, resume: bool = False):
        self.path = Path(path)
        if resume:
            self._fh = open(self.path, "a", encoding="utf-8")
        else:
            if header is None:
                raise ValueError("a new results file needs a header")
            self._fh = open(self.path, "x", encoding="utf-8")  # never overwrite a results file
            self.write({"record": "header", "schema_version": SCHEMA_VERSION, **header})

    def write(self, record: dict) -> None:
        self._fh.write(json.dumps(record, sort_keys=False, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class ResultsFile:
    """A parsed results file: its header and records by type. A torn last line is dropped."""

    path: str
    header: dict
    configs: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)

    def done_keys(self) -> set[tuple]:
        return {result_key(r) for r in self.results}


def read_results(path: str | Path) -> ResultsFile:
    """Read and validate a results file; a wrong schema or a non-results file is a UsageProblem."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageProblem(f"cannot read results file {str(path)!r}: {exc.strerror or exc}") from exc
    records = list(_parse_lines(lines, path))
    if not records or records[0].get("record") != "header":
        raise UsageProblem(f"{str(path)!r} is not an ncclprobe results file (no header record on its first line)")
    header = records[0]
    if header.get("schema_version") != SCHEMA_VERSION:
        raise UsageProblem(f"{str(path)!r} has schema version {header.get('schema_version')!r}; "
                           f"this ncclprobe reads version {SCHEMA_VERSION}")
    out = ResultsFile(path=str(path), header=header)
    buckets = {"config": out.configs, "result": out.results, "summary": out.summaries}
    for record in records[1:]:
        buckets.get(record.get("record"), []).append(record)
    return out


def _parse_lines(lines: Iterable[str], path: Path) -> Iterator[dict]:
    lines = list(lines)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # a write torn by a kill: everything before it is intact
                return
            raise UsageProblem(f"{str(path)!r} line {number} is not JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise UsageProblem(f"{str(path)!r} line {number} is not a JSON object")
        yield record


def trim_incomplete_tail(path: str | Path) -> ResultsFile:
    """Cut a torn last line and an unfinished last configuration group off a results file."""
    path = Path(path)
    read_results(path)  # validates the header and schema first
    data = path.read_bytes()
    keep = _complete_length(data)
    if keep < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
            os.fsync(fh.fileno())
    return read_results(path)


def _complete_length(data: bytes) -> int:
    """Bytes up to the end of the last complete configuration group (or non-config record)."""
    offset, keep, open_group = 0, 0, None     # open_group: [offset, results still expected]
    for line in data.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        try:
            record = json.loads(line) if line.endswith(b"\n") else None
        except json.JSONDecodeError:
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
