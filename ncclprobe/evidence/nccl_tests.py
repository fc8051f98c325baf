"""Read nccl-tests `*_perf` output of every generation into rows, and into our result records.

Formats (../shared/reference/nccl-facts.md §1.2): the data line is size, count, type, redop,
[root], then time/algbw/busbw/#wrong for out-of-place and again for in-place. Before v2.13 there
was no root column and an `error` column (max error) stood where `#wrong` is; `-c 0` prints N/A.
Times are µs, bandwidths GB/s with 1 GB = 1e9 B. Real captures add mpirun tags, prompts and
command lines, NCCL INFO lines between rows, and may lack the footer; all of that is tolerated.

Imported runs become the same records the sweep writes (`ncclprobe.records`), so recommend,
report and diagnose read them unchanged. The NCCL variables a file shows (NCCL's own `set by
environment` lines, or `NAME=value` on the command line) become the configuration's settings.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl_log import parse_nccl_log
from ncclprobe.evidence.text import clean_line
from ncclprobe.nccl.recipes import only_shapes_the_log

_PARAMS = re.compile(r"^#\s*nThread (?P<threads>\d+) nGpus (?P<gpus>\d+) minBytes (?P<min>\d+) maxBytes (?P<max>\d+)"
                     r".*?warmup iters: (?P<warmup>\d+) iters: (?P<iters>\d+)(?:.*?agg iters: (?P<agg>\d+))?"
                     r"(?:.*?graph: (?P<graph>\d+))?")
_RANK = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+) on\s+(?P<host>\S+)\s+device"
                   r"\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$")
_COLUMNS = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+(?P<root>root\s+)?time\s+algbw\s+busbw\s+(?P<check>#wrong|error)")
_FOOTER_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<verdict>OK|FAILED)")
# only a well-formed number counts: a mangled one (`1.2.3`, `nan`) leaves the average unknown
_FOOTER_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"
                         r"(?:\s+(?:OK|FAILED))?\s*$")  # OK/FAILED: with NCCL_TESTS_MIN_BW set
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (?P<v>\S+)")
_COLLECTIVE = re.compile(r"(?:^#\s*Collective test starting: |^[^#].*?\b)(?P<name>[a-z_]+?)_perf\b")
_REDUCING = re.compile(r"^#\s*Reducing maxBytes to (?P<n>\d+)")
_NUMBER = re.compile(r"^-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?$")
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
          "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


@dataclass
class Measurement:
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None          # None when unchecked (-c 0) or in the old `error` format
    max_error: float | None = None   # the old `error` column

    def to_json(self) -> dict:
        return {"time_us": self.time_us, "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps,
                "wrong": self.wrong, **({"max_error": self.max_error} if self.max_error is not None else {})}


@dataclass
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: Measurement
    in_place: Measurement

    def to_json(self) -> dict:
        return {"size_bytes": self.size_bytes, "count": self.count, "type": self.dtype, "redop": self.redop,
                "root": self.root, "out_of_place": self.out_of_place.to_json(), "in_place": self.in_place.to_json()}


@dataclass
class NcclTestsRun:
    rows: list[Row]
    nranks: int | None
    collective: str | None
    collective_inferred: bool = False
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    params: dict = field(default_factory=dict)
    devices: list[dict] = field(default_factory=list)
    nccl_version: str | None = None
    nccl_tests_version: str | None = None
    format: str = "current"            # "current" (root, #wrong) or "old" (no root, error column)
    settings: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"schema_version": 1, "collective": self.collective, "collective_inferred": self.collective_inferred,
                "nranks": self.nranks, "nccl_version": self.nccl_version,
                "nccl_tests_version": self.nccl_tests_version, "format": self.format, "params": dict(self.params),
                "devices": list(self.devices), "settings": dict(self.settings),
                "rows": [r.to_json() for r in self.rows], "avg_busbw_gbps": self.avg_busbw_gbps,
                "out_of_bounds": self.out_of_bounds, "notes": list(self.notes)}


def parse_nccl_tests(text: str) -> NcclTestsRun:
    """Parse nccl-tests output; UsageProblem when it holds no result table."""
    lines = [clean_line(line) for line in text.splitlines()]
    run = NcclTestsRun(rows=[], nranks=None, collective=None)
    columns = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            columns = _header_line(run, stripped) or columns
        elif columns is not None:
            row = _data_row(stripped.split(), columns)
            if row is not None:
                run.rows.append(row)
    if columns is None or not run.rows:
        what = "no result rows" if columns is not None else "no nccl-tests result table (the `#  size  count ...` header)"
        raise UsageProblem(f"{what} found: is this the output of an nccl-tests *_perf binary?")
    _finish(run, text, lines)
    return run


def _header_line(run: NcclTestsRun, line: str) -> tuple[bool, str] | None:
    """Record what a `#` line says; return the column layout when it is the table header."""
    columns = _COLUMNS.match(line)
    if columns:
        run.format = "current" if columns["root"] else "old"
        return bool(columns["root"]), columns["check"]
    for pattern, action in ((_PARAMS, _params), (_RANK, _rank), (_FOOTER_AVG, _avg), (_FOOTER_OOB, _oob),
                            (_TESTS_VERSION, _tests_version), (_REDUCING, _reducing)):
        match = pattern.match(line)
        if match:
            action(run, match)
            break
    return None


def _params(run, m):
    run.params = {key: int(value) for key, value in m.groupdict().items() if value is not None}


def _rank(run, m):
    run.devices.append({"rank": int(m["rank"]), "pid": int(m["pid"]), "host": m["host"], "device": int(m["dev"]),
                        "bus_id": m["bus"], "name": m["name"].strip()})


def _avg(run, m):
    run.avg_busbw_gbps = float(m["bw"])


def _oob(run, m):
    run.out_of_bounds = int(m["n"])


def _tests_version(run, m):
    run.nccl_tests_version = m["v"]


def _reducing(run, m):
    run.notes.append(f"nccl-tests reduced maxBytes to {m['n']} for lack of GPU memory")


def _data_row(tokens: list[str], columns: tuple[bool, str]) -> Row | None:
    has_root, check = columns
    lead = 5 if has_root else 4
    if len(tokens) < lead + 8 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    cells = tokens[lead:lead + 8]
    if not all(_NUMBER.match(c) or c == "N/A" for c in cells) or any(c == "N/A" for c in (cells[:3] + cells[4:7])):
        return None
    if not all(math.isfinite(float(c)) for c in cells if c != "N/A"):  # 1e999: not JSON, not a count
        return None
    root = int(tokens[4]) if has_root and re.match(r"^-?\d+$", tokens[4]) else None
    return Row(int(tokens[0]), int(tokens[1]), tokens[2], tokens[3], root,
               _measurement(cells[:4], check), _measurement(cells[4:], check))


def _measurement(cells: list[str], check: str) -> Measurement:
    time_us, algbw, busbw, verdict = cells
    if check == "error":
        return Measurement(float(time_us), float(algbw), float(busbw), None,
                           None if verdict == "N/A" else float(verdict))
    wrong = None if verdict == "N/A" else int(float(verdict))
    return Measurement(float(time_us), float(algbw), float(busbw), wrong)


def _finish(run: NcclTestsRun, text: str, lines: list[str]) -> None:
    log = parse_nccl_log(text)
    run.nccl_version = log.nccl_version
    run.nranks = len(run.devices) or log.nranks
    run.settings = {k: v for k, v in {**_command_line_settings(lines), **log.env}.items()
                    if k.startswith("NCCL_") and not only_shapes_the_log(k)}
    named = [m["name"] for line in lines for m in [_COLLECTIVE.match(line.strip())] if m]
    run.collective = named[0] if named else _infer_collective(run)
    run.collective_inferred = not named and run.collective is not None
    if run.collective_inferred:
        run.notes.append(f"collective not named in the file; {run.collective} inferred from busbw/algbw")
    if run.avg_busbw_gbps is None:
        run.notes.append("no footer: the output ends before `# Avg bus bandwidth`")


def _command_line_settings(lines: list[str]) -> dict[str, str]:
    """`NAME=value` words on the command line that ran the test (`-x NAME=value` for mpirun)."""
    found: dict[str, str] = {}
    for line in lines:
        if "_perf" not in line or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        for word in words:
            name, sep, value = word.partition("=")
            if sep and re.match(r"^NCCL_[A-Z0-9_]+$", name):
                found[name] = value
    return found


def _infer_collective(run: NcclTestsRun) -> str | None:
    """all_reduce is the only test whose busbw/algbw is 2(n-1)/n; name it only when the rows agree.

    With two ranks that factor is 1, the same as broadcast, reduce and sendrecv: no inference."""
    n = run.nranks
    ratios = [r.out_of_place.busbw_gbps / r.out_of_place.algbw_gbps for r in run.rows if r.out_of_place.algbw_gbps >= 1]
    if not n or n < 3 or not ratios:
        return None
    expected = 2 * (n - 1) / n
    return "all_reduce" if all(abs(ratio - expected) < 0.02 * expected + 0.01 for ratio in ratios) else None


def to_records(run: NcclTestsRun, *, source_file: str, argv: list[str] | None = None,
               collective: str | None = None) -> list[dict]:
    """The run as result records: a header (kind "nccl-tests"), one config, then one result per
    size x in/out-of-place. `collective` overrides what the file says or what was inferred."""
    from datetime import datetime, timezone

    from ncclprobe.records import SCHEMA_VERSION, config_id

    name = collective or run.collective or "unknown"
    cid = config_id(run.settings)
    header = {"record": "header", "schema_version": SCHEMA_VERSION, "kind": "nccl-tests", "argv": list(argv or []),
              "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "source_file": source_file,
              "hostname": run.devices[0]["host"] if run.devices else None,
              "versions": {"nccl": run.nccl_version, "nccl_tests": run.nccl_tests_version},
              "gpus": [{"rank": d["rank"], "name": d["name"], "host": d["host"], "device": d["device"]}
                       for d in run.devices],
              "env": dict(run.settings), "backend": "nccl", "nranks": run.nranks, "topology": None,
              "collective": name, "params": dict(run.params), "avg_busbw_gbps": run.avg_busbw_gbps,
              "notes": list(run.notes)}
    config = {"record": "config", "config_id": cid, "settings": dict(run.settings), "pool": 0,
              "status": "ok" if not run.out_of_bounds else "wrong",
              "reason": None if not run.out_of_bounds else f"nccl-tests counted {run.out_of_bounds} wrong values",
              "proof": {"set_by_environment": dict(run.settings), "source": "nccl-tests output"}}
    mode = "graph" if run.params.get("graph") else "eager"
    results = [_result(row, measurement, in_place, cid, run, name, mode)
               for row in run.rows for in_place, measurement in ((False, row.out_of_place), (True, row.in_place))]
    return [header, config, *results]


def _result(row: Row, m: Measurement, in_place: bool, cid: str, run: NcclTestsRun, collective: str, mode: str) -> dict:
    wrong = m.wrong
    return {"record": "result", "config_id": cid, "settings": dict(run.settings), "collective": collective,
            "mode": mode, "in_place": in_place, "dtype": DTYPES.get(row.dtype, row.dtype), "redop": row.redop,
            "root": row.root, "size_bytes": row.size_bytes, "count": row.count, "nranks": run.nranks,
            "status": "wrong" if wrong else "ok", "reason": f"{wrong} wrong elements" if wrong else None,
            "time_us": m.time_us, "time_us_p10": None, "time_us_p90": None, "algbw_gbps": m.algbw_gbps,
            "busbw_gbps": m.busbw_gbps, "wrong": wrong, "rank_spread_us": None,
            "trials": 1, "iters": run.params.get("iters"), "source": "nccl-tests"}
