"""Read one run of nccl-tests `*_perf` text output, of every generation, into rows.

Formats (src/util.cu `writeResultHeader`/`writeBenchmarkLine*`; nccl-facts.md §1.2): the data line
is size, count, type, redop, [root], then time/algbw/busbw/#wrong for out-of-place and again for
in-place. Before v2.13 there was no root column and an `error` column (max error) stood where
`#wrong` is; `-c 0` prints N/A; `-C 1` prints `cputime` (the host's issue time per call) in the
time column while algbw/busbw still come from the completion time; `-I 1` adds i_min, i_max, i_p99
and i_cv% per placement. Times are µs, bandwidths GB/s with 1 GB = 1e9 B. Real captures add mpirun
tags, prompts and command lines, NCCL INFO lines between rows, and may lack the footer; all of
that is tolerated. A file holding several runs is split first (`nccl_tests_split`); -J JSON has
its own reader (`nccl_tests_json`); both give the same `NcclTestsRun` (`nccl_tests_run`), which
`nccl_tests_records` turns into result records.

The NCCL variables a file shows (NCCL's own `set by environment` lines, or `NAME=value` on the
command line) become the run's settings.
"""

from __future__ import annotations

import math
import re
import shlex

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.launcher import launch_failure, launcher_failures
from ncclprobe.evidence.nccl.nccl_failures import explain
from ncclprobe.evidence.nccl.nccl_log import NcclLog, parse_nccl_log
from ncclprobe.evidence.nccl.nccl_tests_layout import (
    TYPE_NAMES,
    Columns,
    headerless_rows,
    layout_of_row,
)
from ncclprobe.evidence.nccl.nccl_tests_run import (
    Measurement,
    NcclTestsRun,
    Row,
    nccl_settings,
    nccl_version_of_code,
)
from ncclprobe.evidence.text import clean_task_line
from ncclprobe.numbers import ascii_re, is_digits
from ncclprobe.secrets import mask_env, mask_text
from ncclprobe.sizes import MAX_SIZE, format_size
from ncclprobe.strict_json import json_problem, strict_decoder

PARAMS = ascii_re(
    r"^#?\s*nThread (?P<threads>\d{1,19}) nGpus (?P<gpus>\d{1,19}) "
    r"minBytes (?P<min>\d{1,19}) maxBytes (?P<max>\d{1,19})"
    r".*?warmup iters: (?P<warmup>\d{1,19}) iters: (?P<iters>\d{1,19})(?:.*?agg iters: (?P<agg>\d{1,19}))?"
    r"(?:.*?validation: (?P<validation>\d{1,19}))?(?:.*?graph: (?P<graph>\d{1,19}))?"
)
# before 2018 (nccl-tests with NCCL 1.x) the rank line had no Pid
RANK = ascii_re(
    r"^#\s+Rank\s+(?P<rank>\d{1,19})(?:\s+Group\s+\d{1,19})?(?:\s+Pid\s+(?P<pid>\d{1,19}))? on\s+(?P<host>\S+)\s+device"
    r"\s+(?P<dev>\d{1,19})\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$"
)
# before v2.13 every test printed its own header: `type redop` (all_reduce, reduce_scatter, alltoall),
# `type redop root` (reduce), `type root` (broadcast), `type` alone (all_gather, sendrecv); since v2.13 one
# header, `type redop root`, for every test
COLUMNS = ascii_re(
    r"^#?\s*size\s+count\s+type\s+(?P<redop>redop\s+)?(?P<root>root\s+)?(?P<time>cputime|time)\s+algbw"
    r"\s+busbw\s+(?P<check>#wrong|error)(?P<periter>\s+i_min)?"
)
# before 2019 (nccl-tests 1.x, common.cu): `bytes N type op ... time algbw busbw res`, the time in ms,
# `res` the max error; broadcast printed `root` for `op`, all_gather neither
COLUMNS_1X = ascii_re(
    r"^#?\s*bytes\s+N\s+type\s+(?P<redop>op\s+)?(?P<root>root\s+)?time\s+algbw\s+busbw\s+res\b"
)
# nccl-tests 1.x printed its footer without `#`
FOOTER_OOB = ascii_re(r"^#?\s*Out of bounds values\s*:\s*(?P<n>\d{1,19})\s+(?P<verdict>OK|FAILED)")
# only a well-formed number counts: a mangled one (`1.2.3`, `nan`) leaves the average unknown
FOOTER_AVG = ascii_re(
    r"^#?\s*Avg bus bandwidth\s*:\s*(?P<bw>\d{1,19}(?:\.\d*)?(?:[eE][+-]?\d{1,19})?)"
    r"(?:\s+(?:OK|FAILED))?\s*$"
)  # OK/FAILED: with NCCL_TESTS_MIN_BW set
# since 2.18 (util.cu): `nccl-headers=%d nccl-library=%d`, NCCL_VERSION_CODE and ncclGetVersion()
TESTS_VERSION = ascii_re(
    r"^#\s*nccl-tests version (?P<v>\S+)(?:.*?\bnccl-library=(?P<library>\d{1,19}))?"
)
# nccl-tests 1.x (2017-2019): the NCCL major.minor it was compiled with; rccl-tests: its own banner
COMPILED = ascii_re(r"^#\s*NCCL Tests compiled with NCCL (?P<v>\d{1,19}\.\d{1,19})\s*$")
RCCL_TESTS = ascii_re(r"^#?\s*rccl-tests: Version (?P<v>\S+)")
STARTING = ascii_re(r"^#\s*Collective test starting: (?P<name>\S+)")
CONCLUDED = ascii_re(r"^#\s*Collective test concluded")
# ncclprobe export's own line: what its table measured (nccl-tests prints nothing like it)
EXPORTED = ascii_re(r"^#\s*ncclprobe export: (?P<body>.*)$")
_COLLECTIVE = ascii_re(
    r"(?:^#\s*Collective test starting: |^(?!#).*?\b)(?P<name>[a-z_]+?)_perf(?:_mpi)?\b"
)
_REDUCING = ascii_re(r"^#\s*Reducing maxBytes to (?P<n>\d{1,19})")
_NUMBER = ascii_re(r"^-?\d{1,19}(?:\.\d*)?(?:[eE][+-]?\d{1,19})?$")
# nccl-tests' own failure line: `HOST: Test NCCL failure common.cu:777 'reason'`, before 2019 `NCCL
# failure all_reduce.cu:95 'reason'` / `Cuda failure common.cu:N 'reason'`
_TEST_FAILURE = ascii_re(
    r"(?:\bTest (?:NCCL|CUDA|HIP) failure|^(?:NCCL|Cuda|CUDA) failure) \S+\.(?:cu|cc|cpp|h):\d{1,19} '"
)


def parse_nccl_tests(text: str) -> NcclTestsRun:
    """Parse the output of one nccl-tests run. Read too: a run that failed or stopped before its
    first result row (it measured nothing), rows pasted without their header (the layout read from
    the rows, `nccl_tests_layout`), and a launcher's failure with no nccl-tests line. UsageProblem
    for a text that is none of these."""
    lines = [clean_task_line(line) for line in text.splitlines()]
    run = NcclTestsRun(rows=[], nranks=None, collective=None)
    columns = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#") or _bare_header(stripped, columns):
            columns = _header_line(run, stripped) or columns  # before 2.0 `nThread` had no `#`
        elif columns is not None:
            row = data_row(stripped.split(), columns)
            if row is not None:
                run.rows.append(row)
    if columns is None:
        headerless_rows(run, lines, data_row)
    if not (run.rows or columns or _is_nccl_tests(run, lines) or launcher_failures(lines)):
        raise UsageProblem(
            "no nccl-tests result table (the `#  size  count ...` header), no nccl-tests line and "
            "no launcher failure found: is this the output of an nccl-tests *_perf binary?"
        )
    _finish(run, text, lines, table=columns is not None)
    return run


def _bare_header(line: str, columns: Columns | None) -> bool:
    """Lines without `#` that are nccl-tests' own: nccl-tests 1.x's parameters line (before the
    table) and footer, rccl-tests' version banner."""
    return (columns is None and line.startswith("nThread ")) or bool(
        FOOTER_OOB.match(line)
        or FOOTER_AVG.match(line)
        or RCCL_TESTS.match(line)
        or COLUMNS.match(line)  # a paste that lost the `#` of the table header (nccl-tests#37)
        or COLUMNS_1X.match(line)
    )


def _is_nccl_tests(run: NcclTestsRun, lines: list[str]) -> bool:
    """nccl-tests' own header, whether or not a table followed: its parameters line, its version,
    `# Using devices` and the ranks under it; or nccl-tests' own failure line."""
    return (
        bool(run.params or run.nccl_tests_version or run.nccl_compiled_with or run.devices)
        or any(line.strip().lstrip("# ") == "Using devices" for line in lines)
        or any(_TEST_FAILURE.search(line) for line in lines)
    )


def _header_line(run: NcclTestsRun, line: str) -> Columns | None:
    """Record what a `#` line says; return the column layout when it is the table header."""
    columns = COLUMNS.match(line)
    if columns:
        run.format = "current" if columns["check"] == "#wrong" else "old"
        run.header = tuple(name for name in ("redop", "root") if columns[name])
        return Columns(
            bool(columns["redop"]),
            bool(columns["root"]),
            columns["check"],
            columns["time"] == "cputime",
            bool(columns["periter"]),
        )
    old = COLUMNS_1X.match(line)
    if old:
        run.format, run.header = "old", tuple(n for n in ("redop", "root") if old[n])
        return Columns(bool(old["redop"]), bool(old["root"]), "error", False, False, time_ms=True)
    for pattern, action in (
        (PARAMS, _params),
        (RANK, _rank),
        (FOOTER_AVG, _avg),
        (FOOTER_OOB, _oob),
        (TESTS_VERSION, _tests_version),
        (COMPILED, _compiled),
        (RCCL_TESTS, _rccl_tests),
        (_REDUCING, _reducing),
        (EXPORTED, _exported),
    ):
        match = pattern.match(line)
        if match:
            action(run, match)
            break
    return None


def _params(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.params = {key: int(value) for key, value in m.groupdict().items() if value is not None}


def _rank(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.devices.append(
        {
            "rank": int(m["rank"]),
            "pid": int(m["pid"]) if m["pid"] else None,
            "host": m["host"],
            "device": int(m["dev"]),
            "bus_id": m["bus"],
            "name": m["name"].strip(),
        }
    )


def _avg(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.avg_busbw_gbps = float(m["bw"])


def _oob(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.out_of_bounds = int(m["n"])


def _tests_version(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.nccl_tests_version = m["v"]
    if m["library"]:
        run.nccl_version = nccl_version_of_code(int(m["library"]))


def _compiled(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.nccl_compiled_with = m["v"]


def _rccl_tests(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.nccl_tests_version = f"rccl-tests {m['v']}"


def _reducing(run: NcclTestsRun, m: re.Match[str]) -> None:
    run.notes.append(f"nccl-tests reduced maxBytes to {m['n']} for lack of GPU memory")


def _exported(run: NcclTestsRun, m: re.Match[str]) -> None:
    try:
        doc = strict_decoder().decode(m["body"])
    except (ValueError, RecursionError) as exc:
        if json_problem(exc) is None:
            raise
        return  # not the line ncclprobe export writes: it is no evidence either way
    if isinstance(doc, dict):
        run.exported = doc


def data_row(tokens: list[str], columns: Columns) -> Row | None:
    # a test without a reduction printed its redop cell empty (alltoall before v2.17, all_gather and
    # broadcast v2.13-v2.16, hypercube): then the token after the type is already a number
    redop_shown = columns.redop and len(tokens) > 3 and not _NUMBER.match(tokens[3])
    lead = 3 + redop_shown + columns.root
    per = 8 if columns.per_iter else 4
    if len(tokens) < lead + 2 * per or not is_digits(tokens[0]) or not is_digits(tokens[1]):
        return None
    cells = tokens[lead : lead + 2 * per]
    if not all(_NUMBER.match(c) or c == "N/A" for c in cells):
        return None
    if not all(
        math.isfinite(float(c)) and float(c) >= 0 for c in cells if c != "N/A"
    ):  # 1e999: not JSON, not a count; a negative time or bandwidth: no measurement
        return None
    placements = [cells[:per], cells[per:]]
    missing = [
        all(c == "N/A" for c in cells_[:4]) for cells_ in placements
    ]  # ncclprobe export: not measured
    if all(missing) or any(
        c == "N/A" for cells_, gone in zip(placements, missing) if not gone for c in cells_[:3]
    ):
        return None
    root_cell = tokens[lead - 1] if columns.root else ""
    if columns.root and not is_digits(root_cell.removeprefix("-")):
        return None
    root = int(root_cell) if columns.root else None
    size = int(tokens[0])
    if size > MAX_SIZE:  # 19 digits fit the pattern, not a message nccl-tests sends
        return None
    oop, ip = (
        None if gone else _measurement(c, columns, size) for c, gone in zip(placements, missing)
    )
    return Row(size, int(tokens[1]), tokens[2], tokens[3] if redop_shown else "none", root, oop, ip)


def _measurement(cells: list[str], columns: Columns, size: int) -> Measurement:
    time_us, algbw, busbw, verdict = cells[:4]
    time_value: float | None = float(time_us) * (1000 if columns.time_ms else 1)
    cpu = None
    if columns.cputime:  # the time column is the issue time; the completion time is size / algbw
        cpu, time_value = time_value, (size / (float(algbw) * 1e3) if float(algbw) > 0 else None)
    if columns.check == "error":
        wrong, max_error = None, None if verdict == "N/A" else float(verdict)
    else:
        wrong, max_error = (None if verdict == "N/A" else int(float(verdict))), None
    iteration = None
    if columns.per_iter:
        i_min, i_max, i_p99, i_cv = (float(c) for c in cells[4:8])
        iteration = {
            "min_us": i_min,
            "p99_us": i_p99,
            "max_us": i_max,
            "cv_pct": i_cv,
            "clock": "nccl-tests -I (CUDA events per iteration)",
        }
    return Measurement(time_value, float(algbw), float(busbw), wrong, max_error, cpu, iteration)


def _finish(run: NcclTestsRun, text: str, lines: list[str], table: bool = True) -> None:
    log = parse_nccl_log(
        "\n".join(lines), "nccl-tests output"
    )  # without task labels: NCCL's lines behind `0: ` count too
    _failures(run, log, lines)
    run.nccl_version = (
        log.nccl_version or run.nccl_version
    )  # NCCL's own banner first, else nccl-tests' line
    run.nranks = len(run.devices) or log.nranks or _exported_int(run, "nranks")
    exported = run.exported or {}
    settings = exported.get("settings")
    shown = settings if isinstance(settings, dict) else {}
    run.settings = mask_env(
        nccl_settings(
            {
                **command_line_settings(lines),
                **log.env,
                **{str(k): str(v) for k, v in shown.items()},
            }
        )
    )  # masked for every output
    named = [m["name"] for line in lines for m in [_COLLECTIVE.match(line.strip())] if m]
    run.collective = named[0] if named else _infer_collective(run)
    run.collective_inferred = not named and run.collective is not None
    if run.collective_inferred:
        how = "the table's columns" if run.collective == "reduce" else "busbw/algbw"
        run.notes.append(f"collective not named in the file; {run.collective} inferred from {how}")
    if run.nccl_compiled_with:
        run.notes.append(
            f"nccl-tests compiled with NCCL {run.nccl_compiled_with}"
            + ("" if run.nccl_version else " (the NCCL that ran printed no version line)")
        )
    if not run.rows:
        run.notes.insert(0, nothing_measured(run, lines, table))
    elif run.avg_busbw_gbps is None:
        run.notes.append(
            f"no footer: the output ends after the {format_size(run.rows[-1].size_bytes)} row, "
            "before `# Avg bus bandwidth` (the run stopped there, or the paste is cut)"
        )
    cut = _cut_row(lines)
    if cut:
        run.notes.append(f"the last line is a result row cut short, not read: `{mask_text(cut)}`")


def _cut_row(lines: list[str]) -> str | None:
    """The file's last line when it starts like a result row (size, count, type) and is none."""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    tokens = last.split()
    if len(tokens) >= 3 and is_digits(tokens[0]) and is_digits(tokens[1]):
        if tokens[2] in TYPE_NAMES and layout_of_row(tokens) is None:
            return last
    return None


def nothing_measured(run: NcclTestsRun, lines: list[str], table: bool) -> str:
    """What a run without a result row proves: it measured nothing; why only where a line says."""
    if not (table or _is_nccl_tests(run, lines)):
        return (
            "measured nothing: no nccl-tests line in the file, only the launcher's failure: the "
            "test failed or stopped before its first result row (if it started at all)"
        )
    shown = run.failures or run.warn_lines or run.not_explained
    return "measured nothing: the run " + (
        "failed before its first result row (the failure lines say where)"
        if shown
        else "stopped before its first result row and no line says why (it hung, was stopped, "
        "or the output was cut there)"
    )


def _exported_int(run: NcclTestsRun, key: str) -> int | None:
    value = (run.exported or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def command_line_settings(lines: list[str]) -> dict[str, str]:
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

    With two ranks that factor is 1, the same as broadcast, reduce and sendrecv: no inference. Before
    v2.13 the header itself tells one test apart: only reduce printed both a redop and a root column
    (broadcast, scatter and gather printed root alone; all_gather, sendrecv and hypercube neither)."""
    if run.format == "old" and run.header == ("redop", "root"):
        return "reduce"
    n = run.nranks
    ratios = [
        r.out_of_place.busbw_gbps / r.out_of_place.algbw_gbps
        for r in run.rows
        if r.out_of_place and r.out_of_place.algbw_gbps >= 1
    ]
    if not n or n < 3 or not ratios:
        return None
    expected = 2 * (n - 1) / n
    return (
        "all_reduce"
        if all(abs(ratio - expected) < 0.02 * expected + 0.01 for ratio in ratios)
        else None
    )


def _failures(run: NcclTestsRun, log: NcclLog, lines: list[str]) -> None:
    """What failed, explained where a class knows it (`nccl_failures`), the rest not explained; the
    footer's verdict lines (`Out of bounds values : N FAILED`, NCCL_TESTS_MIN_BW's `FAILED`) are
    the wrong results and the threshold, told by the run's own summary (`wrong_summary`)."""
    kinds, warnings = explain(log)
    run.failures = [k.to_json() for k in kinds if k.severity != "info"]
    launched = launcher_failures(lines)
    if launched:
        run.failures.append(launch_failure(launched))
    run.warn_lines = warnings
    log.failure_lines.forget(
        line.text
        for line in log.failure_lines.lines
        if FOOTER_OOB.match(line.text)
        or FOOTER_AVG.match(line.text)
        or COLUMNS.match(line.text.strip())  # its `error` column, in a header without `#`
        or line.text.strip() in launched
    )
    run.not_explained = log.failure_lines
