"""Read nvbandwidth output (NVIDIA/nvbandwidth; text, and `-j` JSON) into matrix records.

Text (output.cpp, v0.2-v0.10): `Running <test>.`, a description such as `memcpy CE CPU(row) -> GPU(column)
bandwidth (GB/s)` or `memory latency SM CPU(row) <-> GPU(column) (ns)`, a column-index header, rows
of numbers or `N/A`, then `SUM <test> <value>` (v0.10 adds `COEFFICIENT_OF_VARIATION`). `Waiving <test>.`
stands where a test did not run (a peer test is waived when the driver cannot map peer memory,
NVIDIA/nvbandwidth#13). A copy that returned wrong data prints `Invalid value when checking the
pattern at ADDR`, `Current offset : N` and an `ASSERT` line, and the run ends there
(NVIDIA/nvbandwidth#34): that is wrong data, recorded in `corrupt`, never an unreadable file. Pasted
text often quotes lines (`> Running ...`) or loses the header's indentation; both are read.
JSON (json_output.cpp): `{"nvbandwidth": {"testcases":
[{"name", "status", "bandwidth_description", "bandwidth_matrix": [["12.3", "N/A"]], "sum"}]}}`; the
matrix cells are strings. Tools that wrap it print warnings around the JSON, so the JSON object is
found where it starts.

Orientation: `A(row) -> B(column)` means rows send; `A(row) <- B(column)` means rows receive, and the
matrix is transposed so rows are always the source. Latencies in ns become us.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.failure_lines import FailureLines, scan
from ncclprobe.evidence.node.matrix import Matrix
from ncclprobe.evidence.text import clean_line
from ncclprobe.numbers import ascii_re
from ncclprobe.strict_json import json_problem, strict_decoder
from ncclprobe.validate import shown

_RUNNING = ascii_re(r"^(?:>\s*)?Running (?P<name>\w+)\.\s*$")
_WAIVING = ascii_re(r"^(?:>\s*)?Waiving (?P<name>\w+)\.\s*$")
_PATTERN_FAIL = ascii_re(r"^Invalid value when checking the pattern at (?P<address>\S+)\s*$")
_OFFSET = ascii_re(r"^Current offset\s*:\s*(?P<offset>\d+)\s*$")
_DESCRIPTION = ascii_re(
    r"^(?:>\s*)?(?:memcpy|memory latency) (?P<engine>CE|SM) (?P<a>CPU|GPU)\(row\) (?P<arrow><->|->|<-) "
    r"(?P<b>CPU|GPU)\(column\)(?: bandwidth)? \((?P<unit>GB/s|ns)\)\s*$"
)
_NUMBER = ascii_re(r"^\d+(?:\.\d+)?$")


@dataclass
class NvbandwidthOutput:
    matrices: list[Matrix]
    version: str | None = None
    driver: str | None = None
    devices: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # test -> status (Waived, Error ...)
    corrupt: list[dict] = field(default_factory=list)  # {"test", "address", "offset"}: wrong data
    notes: list[str] = field(default_factory=list)
    # lines that look like a failure (a tool that could not run: `Failed to initialize NVML`, CUDA
    # errors), shown as they are (`evidence.failure_lines`)
    failure_lines: FailureLines = field(default_factory=lambda: FailureLines("output"))

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "tool": "nvbandwidth",
            "version": self.version,
            "driver": self.driver,
            "devices": self.devices,
            "skipped": self.skipped,
            "corrupt": self.corrupt,
            "matrices": [m.to_record() for m in self.matrices],
            "notes": list(self.notes),
        }


def looks_like_nvbandwidth(text: str) -> bool:
    head = text[:200_000]
    return "nvbandwidth" in head or bool(
        re.search(
            r"^(?:>\s*)?Running \w+_(?:ce|sm)\.\s*$|^(?:>\s*)?memcpy "
            r"(?:CE|SM) (?:CPU|GPU)\(row\)",
            head,
            re.M,
        )
    )


def parse_nvbandwidth(text: str, source: str = "nvbandwidth output") -> NvbandwidthOutput:
    start = _json_start(text)
    out = _parse_json(text, start) if start is not None else _parse_text(text)
    out.failure_lines = scan(text.splitlines(), source)
    return out


def _json_start(text: str) -> int | None:
    # `[ \t]`, not `\s`: under re.M, `^\s*` from every line start ran over every blank line after it
    m = re.search(r'^[ \t]*\{[ \t\r]*\n?[ \t]*"nvbandwidth"\s*:', text, re.M)
    return m.start() if m else None


def _parse_json(text: str, start: int) -> NvbandwidthOutput:
    try:
        doc, _ = strict_decoder().raw_decode(text[start:].lstrip())  # warning lines may follow
    except json.JSONDecodeError as exc:
        raise UsageProblem(
            f"nvbandwidth JSON is malformed or cut short: {exc.msg} at char {exc.pos}"
        ) from None
    except (ValueError, RecursionError) as exc:
        if json_problem(exc) is None:
            raise
        raise UsageProblem(f"nvbandwidth JSON: {json_problem(exc)}") from None
    body = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("testcases", []), list):
        raise UsageProblem('nvbandwidth JSON has no "nvbandwidth" object with a "testcases" list')
    out = NvbandwidthOutput(
        matrices=[],
        version=body.get("version"),
        driver=body.get("Driver Version"),
        devices=[str(d) for d in body.get("GPU Device list", [])],
    )
    for case in body.get("testcases", []):
        if not isinstance(case, dict) or not isinstance(case.get("name"), str):
            raise UsageProblem("nvbandwidth JSON test case without a name (a string)")
        if case.get("status") != "Passed":
            out.skipped[str(case["name"])] = str(case.get("status") or "no status") + (
                f": {case['error']}" if case.get("error") else ""
            )
            continue
        grid = case.get("bandwidth_matrix")
        if not isinstance(grid, list) or not all(isinstance(r, list) for r in grid):
            raise UsageProblem(
                f"nvbandwidth test {case['name']}: bandwidth_matrix is not a list of rows"
            )
        cells = [[_cell(v, case["name"]) for v in row] for row in grid]
        out.matrices.append(
            _matrix(case["name"], str(case.get("bandwidth_description", "")).strip(), cells)
        )
    if body.get("error"):
        out.notes.append(f"nvbandwidth reported an error: {body['error']}")
    return _finish(out)


def _cell(value: object, test: str) -> float | None:
    text = str(value).strip()
    if text == "N/A":
        return None
    if not _NUMBER.match(text):
        raise UsageProblem(f"nvbandwidth test {test}: cell {shown(value)} is not a number or N/A")
    return float(text)


def _parse_text(text: str) -> NvbandwidthOutput:
    lines = [clean_line(line) for line in text.splitlines()]
    out = NvbandwidthOutput(matrices=[])
    current = None
    number = 0
    while number < len(lines):
        line = lines[number].strip()
        if line.startswith("nvbandwidth Version:"):
            out.version = line.split(":", 1)[1].strip()
        elif line.startswith("Driver Version:"):
            out.driver = line.split(":", 1)[1].strip()
        elif re.match(r"^Device \d+: ", line):
            out.devices.append(line)
        running, waiving, failed = (
            _RUNNING.match(line),
            _WAIVING.match(line),
            _PATTERN_FAIL.match(line),
        )
        if running:
            current = running["name"]
        elif waiving:
            out.skipped[waiving["name"]] = "waived"
        elif failed:
            offset = next(
                (
                    int(m["offset"])
                    for m in (_OFFSET.match(n.strip()) for n in lines[number + 1 : number + 3])
                    if m
                ),
                None,
            )
            out.corrupt.append(
                {"test": current or "unnamed", "address": failed["address"], "offset": offset}
            )
        elif _DESCRIPTION.match(line):
            rows, number = _text_rows(lines, number + 1, line)
            out.matrices.append(
                _matrix(current or _sum_name(lines, number) or "unnamed", line, rows)
            )
            current = None
            continue
        number += 1
    if not out.matrices and not out.corrupt:
        raise UsageProblem(
            "no nvbandwidth result matrix found: expected a line such as "
            "'memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)' followed by its rows"
            + (
                f" (every test was waived: {', '.join(out.skipped)}; nvbandwidth waives a peer test "
                "when the driver cannot map peer memory)"
                if out.skipped
                else ""
            )
        )
    return _finish(out)


def _text_rows(lines: list[str], number: int, what: str) -> tuple[list[list[float | None]], int]:
    header = lines[number].split() if number < len(lines) else []
    if not header or header != [str(i) for i in range(len(header))]:
        raise UsageProblem(
            f"nvbandwidth '{what}': no column header at line {number + 1} (output cut short?)"
        )
    rows: list[list[float | None]] = []
    number += 1
    while number < len(lines) and lines[number].split()[:1] == [str(len(rows))]:
        tokens = lines[number].split()
        if len(tokens) != len(header) + 1:
            raise UsageProblem(
                f"nvbandwidth '{what}': row {len(rows)} at line {number + 1} has "
                f"{len(tokens) - 1} values for {len(header)} columns"
            )
        rows.append([_cell(t, what) for t in tokens[1:]])
        number += 1
    if not rows:
        raise UsageProblem(f"nvbandwidth '{what}': no rows after the header (output cut short?)")
    return rows, number


def _sum_name(lines: list[str], number: int) -> str | None:
    """The test's name from the `SUM <test> <value>` line after its rows (when `Running` was cut)."""
    for line in lines[number : number + 3]:
        m = re.match(r"^SUM (\w+) ", line.strip())
        if m:
            return m[1]
    return None


def _matrix(name: str, description: str, cells: list[list[float | None]]) -> Matrix:
    m = _DESCRIPTION.match(description)
    if not m:
        raise UsageProblem(
            f"nvbandwidth test {name}: description {shown(description)} is not one this reader knows"
        )
    if m["a"] != m["b"]:
        rows, cols, cells = _host_orientation(name, m, cells)
    else:
        rows, cols = _labels(m["a"], len(cells)), _labels(m["b"], len(cells[0]) if cells else 0)
        if m["arrow"] == "<-":  # rows receive: make rows the senders
            cells = [list(col) for col in zip(*cells)]
    latency = m["unit"] == "ns"
    if latency:
        cells = [[None if v is None else v / 1000.0 for v in row] for row in cells]
    access = "read" if "_read" in name else "write" if "_write" in name else None
    peer = "enabled" if m["a"] == m["b"] == "GPU" else None
    return Matrix(
        metric="latency" if latency else "bandwidth",
        rows=rows,
        cols=cols,
        values=cells,
        direction="bidirectional"
        if m["arrow"] == "<->" or "bidirectional" in name
        else "unidirectional",
        peer_access=peer,
        engine=m["engine"].lower(),
        access=access,
        source=f"nvbandwidth {name}: {description}",
        timer="gpu" if latency else None,
        extra={"test": name},
    )


def _host_orientation(
    name: str, m: re.Match[str], cells: list[list[float | None]]
) -> tuple[list[str], list[str], list[list[float | None]]]:
    """CPU x GPU matrices as rows = sender. One host row or column is the CPU whatever the description
    says (v0.10 labels device_to_host `GPU(row) -> CPU(column)` but prints one row of GPUs); the test
    name says which way data moved."""
    if len(cells) == 1 and (len(cells[0]) > 1 or m["a"] == "CPU"):
        gpus = cells[0]
    elif all(len(r) == 1 for r in cells):
        gpus = [r[0] for r in cells]
    else:  # several hosts (multinode): keep as printed
        return _labels(m["a"], len(cells)), _labels(m["b"], len(cells[0])), cells
    labels = [f"GPU{i}" for i in range(len(gpus))]
    if name.startswith(("device_to_host", "all_to_host")):
        return labels, ["CPU"], [[v] for v in gpus]
    return ["CPU"], labels, [list(gpus)]


def _labels(kind: str, count: int) -> list[str]:
    if kind == "CPU" and count == 1:
        return ["CPU"]
    return [f"{kind}{i}" for i in range(count)]


def _finish(out: NvbandwidthOutput) -> NvbandwidthOutput:
    if out.skipped:
        out.notes.append(
            f"{len(out.skipped)} test(s) not run: "
            + ", ".join(f"{k} ({v})" for k, v in out.skipped.items())
        )
    out.notes.append(
        "nvbandwidth measures GPU pairs only where the driver allows peer access; "
        "N/A cells are pairs it did not measure"
    )
    return out
