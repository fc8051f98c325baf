"""A text file of several nccl-tests runs -> one text per run; interleaved processes refused.

Users concatenate runs (`for algo in ring tree; do ...; done > all.txt`). Each run begins with its
own header (`# nccl-tests version`, `# Collective test starting:`, `# nThread ...`) and ends with
its footer (`# Avg bus bandwidth`, `# Collective test concluded:`). A new run starts where a header
line repeats one the current run already has, or follows the current run's rows or footer; lines
after a footer (a prompt, a command line with NCCL_* settings, `=== rep 2 ===`) open the next run.

Interleaved output is different: a binary built without MPI and launched N times by mpirun or srun
runs N independent tests, whose lines mix in one stream. It shows as a second header arriving
before the first run printed a row (the processes print their headers together), or as sizes that
go back down inside one run's table where no new cycle (`-N`) or type/op (`-d all`, `-o all`) starts.
Such a file is refused with the reason: its runs cannot be told apart, and each is a separate test
(nranks 1 each with -g 1, so busbw 0), not the N-rank run the user meant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_tests import (
    COLUMNS,
    CONCLUDED,
    FOOTER_AVG,
    FOOTER_OOB,
    PARAMS,
    RANK,
    STARTING,
    TESTS_VERSION,
    parse_nccl_tests,
)
from ncclprobe.evidence.nccl.nccl_tests_run import NcclTestsRun
from ncclprobe.evidence.text import clean_task_line

# the table header counts too: a pasted run often starts at it (its `# nThread` lines trimmed away), and
# nccl-tests prints it once per run
HEADERS = (
    ("version", TESTS_VERSION),
    ("starting", STARTING),
    ("params", PARAMS),
    ("table", COLUMNS),
)
FOOTERS = (FOOTER_AVG, FOOTER_OOB, CONCLUDED)
_ROW = re.compile(r"^\d+\s+\d+\s+\S+\s+\S+\s")
_FAILURE = re.compile(r"fail|error|abort", re.IGNORECASE)
REBUILD = (
    "rebuild nccl-tests with MPI (make MPI=1) and launch it once with mpirun -np N (one rank per GPU), "
    "or run one process with -g N"
)


@dataclass
class Segment:
    lines: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    rows: int = 0
    ended: bool = False
    failed: bool = False


def split_runs(text: str) -> list[str]:
    """The text of each run, in order; UsageProblem for interleaved processes."""
    segments: list[Segment] = []
    current = Segment()
    tail: list[str] = []
    for raw in text.splitlines():
        if not raw.strip():  # kept where it falls, nothing to recognise (a million took 11 s)
            (tail if current.ended else current.lines).append(raw)
            continue
        line = clean_task_line(raw).strip()
        kind = next((name for name, pattern in HEADERS if pattern.match(line)), None)
        if kind and current.kinds and (kind in current.kinds or current.rows or current.ended):
            if not current.rows and not current.ended and not current.failed:
                raise UsageProblem(
                    interleaved_message(
                        text, "a second run's header began before the first printed any result row"
                    )
                )
            segments.append(current)
            current, tail = Segment(lines=tail), []
        if current.ended and not kind and not _is_footer(line) and line != "#":
            tail.append(raw)  # after a footer: the next run's preamble (or trailing noise)
            continue
        _add(current, raw, line, kind)
    current.lines += tail
    segments.append(current)
    runs = ["\n".join(s.lines) + "\n" for s in segments if s.kinds or s.rows]
    return runs or [
        text
    ]  # no header and no row: the reader says what the text is (a launch failure?)


def _add(segment: Segment, raw: str, line: str, kind: str | None) -> None:
    segment.lines.append(raw)
    if kind:
        segment.kinds.add(kind)
    elif _is_footer(line):
        segment.ended = True
    elif _ROW.match(line):
        segment.rows += 1
    elif not line.startswith("#") and _FAILURE.search(line):
        segment.failed = True


def _is_footer(line: str) -> bool:
    return any(pattern.match(line) for pattern in FOOTERS)


def parse_runs(text: str) -> tuple[list[NcclTestsRun], list[str]]:
    """Every run in the text, parsed, and notes on runs left out (no result rows: a failed run)."""
    runs, notes, first_error = [], [], None
    for index, part in enumerate(split_runs(text), 1):
        try:
            run = parse_nccl_tests(part)
        except UsageProblem as exc:
            first_error = first_error or exc
            notes.append(f"run {index} left out: {exc}")
            continue
        _check_sizes(run, text)
        runs.append(run)
    if not runs:
        raise first_error or UsageProblem("no nccl-tests result table found")
    return runs, notes if len(runs) + len(notes) > 1 else []


def _check_sizes(run: NcclTestsRun, text: str) -> None:
    """Within one (type, op) sizes grow, each once; they restart only after the run's largest size (-N).
    Zero-byte rows repeat legitimately (all_gather of fewer elements than ranks rounds to 0)."""
    top = run.params.get("max")
    last: dict[tuple, int] = {}
    seen: dict[tuple, set] = {}
    for row in run.rows:
        key, size = (row.dtype, row.redop), row.size_bytes
        previous = last.get(key)
        cycle_done = previous is not None and top is not None and previous >= _cycle_end(run, top)
        if cycle_done:
            seen[key] = set()
        if previous is not None and size < previous and not cycle_done:
            raise UsageProblem(
                interleaved_message(
                    text,
                    f"the sizes of one table go back from {previous} to "
                    f"{size} bytes in the middle of a sweep",
                )
            )
        if size and size in seen.setdefault(key, set()):
            raise UsageProblem(
                interleaved_message(
                    text, f"the size {size} appears twice in one sweep of one table"
                )
            )
        seen[key].add(size)
        last[key] = size


def _cycle_end(run: NcclTestsRun, top: int) -> int:
    """The largest size the table reaches (nccl-tests rounds maxBytes to its collective's layout)."""
    return min(top, max(r.size_bytes for r in run.rows))


def interleaved_message(text: str, sign: str) -> str:
    cleaned = [clean_task_line(line).strip() for line in text.splitlines()]
    headers = sum(1 for line in cleaned if PARAMS.match(line))
    devices = [RANK.match(line) for line in cleaned]
    zero = sum(1 for m in devices if m and m["rank"] == "0")
    processes = max(headers, zero, 2)
    ranks = sum(1 for m in devices if m) // processes if any(devices) else None
    each = f" with {ranks} rank{'s' if ranks != 1 else ''} each" if ranks else ""
    busbw = " (one rank: busbw 0)" if ranks == 1 else ""
    return (
        f"this output interleaves {processes} nccl-tests processes that ran separately{each}{busbw}: {sign}. "
        f"A binary built without MPI and launched {processes} times runs {processes} independent tests, not "
        f"one {processes}-process run, and their lines cannot be told apart; {REBUILD}"
    )
