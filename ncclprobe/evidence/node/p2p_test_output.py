"""Read p2pBandwidthLatencyTest output (NVIDIA cuda-samples) into matrix records.

Every generation prints the same skeleton (checked against the sample's source, cuda-samples
`Samples/5_Domain_Specific/p2pBandwidthLatencyTest/p2pBandwidthLatencyTest.cu`, old and new):
`Device: N, NAME, pciBusID: X, pciDeviceID: X, pciDomainID:X` lines, `Device=i CAN|CANNOT Access Peer
Device=j` lines, a `P2P Connectivity Matrix`, then titled matrices. Titles vary by version and flags:
`Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)` (older: no `(P2P Writes)`),
`(P2P Reads)` variants with `--p2p_read`, `Bidirectional ...`, and latency matrices whose body is a
`GPU` block (CUDA events) followed by a `CPU` block (host timer) in newer versions, or one `D\\D`
block in older ones. Diagonals are same-GPU copies. `--sm_copy` changes the peer-enabled copies to a
kernel; the output does not say so, so the engine is taken from a pasted command line that runs the
test with `--sm_copy` and is otherwise the tool's default (copy engine), with a note saying so. A
line that only mentions the flag (NVIDIA/nccl#814 pastes `# Without --sm_copy` above its matrices)
is no command line.

A paste is often cut: after the device list, after the driver's `CAN/CANNOT Access Peer` lines
(the test prints them all before it measures), after the connectivity matrix, or inside a matrix.
It is read as far as it goes: every pair's peer access the driver's lines give (the pairs whose
lines are missing named), the complete rows of a matrix cut at the end of the file (its missing rows
left empty), and a note that says where the output ends and that no bandwidth was measured in the
file when no matrix came. A matrix broken in the middle of the file, or one whose size disagrees
with the device list, is a UsageProblem naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.failure_lines import FailureLines, looks_like_failure, scan, shown
from ncclprobe.evidence.node.matrix import Matrix, gpu_labels
from ncclprobe.evidence.node.p2p_access import access_notes
from ncclprobe.evidence.text import clean_line
from ncclprobe.numbers import ascii_re

BANNER = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"
_DEVICE = ascii_re(
    r"^Device: (?P<i>\d{1,19}), (?P<name>.*), pciBusID: (?P<bus>[0-9a-fA-F]+), "
    r"pciDeviceID: (?P<dev>[0-9a-fA-F]+), pciDomainID:\s*(?P<dom>[0-9a-fA-F]+)\s*$"
)
_ACCESS = ascii_re(
    r"^Device=(?P<i>\d{1,19}) (?P<can>CAN|CANNOT) Access Peer Device=(?P<j>\d{1,19})\s*$"
)
_TITLE = ascii_re(
    r"^(?:(?P<dir>Uni|Bi)directional )?P2P=(?P<peer>Enabled|Disabled) (?P<metric>Bandwidth|Latency)"
    r"(?: \(P2P (?P<access>Writes|Reads)\))? Matrix \((?P<unit>GB/s|us)\)\s*$"
)
_HEADER = ascii_re(r"^\s*(?P<kind>D\\D|GPU|CPU)(?P<cols>(?:\s+\d{1,19})+)\s*$")
_NUMBER = ascii_re(r"^\d{1,19}(?:\.\d{1,19})?$")
# the first run of the test on the line, held (a look-ahead is atomic): searched from every occurrence, `.*` made a
# line of repeated names quadratic (1 MB: 7 s; 4 MB: over 75 s); the first has every later flag
_SM_COPY_RUN = ascii_re(
    r"^(?=(?P<run>.*?p2pBandwidthLatencyTest(?:\.exe)?\s))(?P=run)(?:.*\s)?--sm_copy(?:\s|$)"
)
EXPECTED = (
    "Unidirectional P2P=Disabled Bandwidth",
    "Unidirectional P2P=Enabled Bandwidth",
    "Bidirectional P2P=Disabled Bandwidth",
    "Bidirectional P2P=Enabled Bandwidth",
    "P2P=Disabled Latency",
    "P2P=Enabled Latency",
)


class CutShort(Exception):
    """The file ends inside a matrix (or right after its title): what was read of it."""

    def __init__(
        self,
        what: str,
        line: int,
        rows: list[list[float]],
        expected: int | None,
        stopped: str | None = None,
    ):
        super().__init__(what)
        self.what, self.line, self.rows, self.expected = what, line, rows, expected
        self.stopped = stopped  # the failure line the output ends with, when one is there
        self.matrices: list[Matrix] = []  # the matrices read of the cut block, rows padded

    def note(self) -> str:
        where = (
            f"inside '{self.what}' ({len(self.rows)} of {self.expected} rows read; the rest left empty)"
            if self.expected
            else f"right after the title '{self.what}'"
        )
        if self.stopped and not self.expected:
            return f"the test stopped right after the title '{self.what}': it ends with `{self.stopped}`"
        if self.stopped:
            return f"the test stopped {where}: it ends with `{self.stopped}`"
        return f"the output is cut: it ends at line {self.line}, {where}"


@dataclass
class P2PTestOutput:
    devices: list[dict]  # index, name, pci_bus_id
    peer_access: list[list[bool | None]]  # CAN/CANNOT lines (diagonal True)
    matrices: list[Matrix]
    connectivity: list[list[int]] | None = None
    notes: list[str] = field(default_factory=list)
    # lines that look like a failure (a tool that could not run: `Failed to initialize NVML`, CUDA
    # errors), shown as they are (`evidence.failure_lines`)
    failure_lines: FailureLines = field(default_factory=lambda: FailureLines("output"))

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "tool": "p2pBandwidthLatencyTest",
            "devices": self.devices,
            "peer_access": self.peer_access,
            "connectivity": self.connectivity,
            "matrices": [m.to_record() for m in self.matrices],
            "notes": list(self.notes),
        }


def looks_like_p2p_test(text: str) -> bool:
    """The banner, a bandwidth title, or (a paste of its first lines) the driver's peer access
    lines or the connectivity matrix's title."""
    return BANNER in text[:200_000] or bool(
        re.search(
            r"^[ \t]*(?:(?:Uni|Bi)directional P2P=(?:Enabled|Disabled) Bandwidth"
            r"|Device=\d{1,19} (?:CAN|CANNOT) Access Peer Device=\d{1,19}\s*$"
            r"|P2P Connectivity Matrix\s*$)",
            text[:200_000],
            re.M,
        )
    )


def parse_p2p_test(text: str, source: str = "p2pBandwidthLatencyTest output") -> P2PTestOutput:
    lines = [clean_line(line) for line in text.splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()  # where the output ends: its last line that holds anything
    devices, access = _devices(lines), _access_lines(lines)
    sm_copy = any(_SM_COPY_RUN.search(line) for line in lines)
    count = len(devices) or None
    matrices, connectivity, seen, cut = [], None, [], None
    number = 0
    try:
        while number < len(lines):
            line = lines[number].strip()
            if line == "P2P Connectivity Matrix":
                block, number = _block(
                    lines, number + 1, count, "P2P Connectivity Matrix", integers=True
                )
                connectivity = [[int(v) for v in row] for row in block[1]]
                count = count or len(connectivity)
                continue
            title = _TITLE.match(line)
            if title:
                found, number = _titled(lines, number, title, count, sm_copy)
                count = count or len(found[0].rows)
                matrices += found
                seen.append(_short(title))
                continue
            number += 1
    except CutShort as end:
        cut = end
        if end.what == "P2P Connectivity Matrix":
            connectivity = [[int(v) for v in row] for row in end.rows] or None
        matrices += end.matrices
    if not (matrices or access or connectivity or devices):
        raise UsageProblem(
            "no p2pBandwidthLatencyTest matrix, device list or peer access line found: expected "
            "'Device=i CAN Access Peer Device=j' lines or a title such as "
            "'Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)' followed by its rows"
        )
    count = count or (len(matrices[0].rows) if matrices else 1 + max(max(p) for p in access))
    out = P2PTestOutput(
        devices=devices,
        peer_access=_access_matrix(access, count),
        matrices=matrices,
        connectivity=connectivity,
    )
    if cut is not None:
        out.notes.append(cut.note())
    if not matrices:
        out.notes.append(
            "no bandwidth or latency matrix in the file: no bandwidth measured"
            + ("" if cut else " (the output ends before the first matrix)")
        )
    missing = [t for t in EXPECTED if t not in seen]
    if missing and matrices:
        out.notes.append("output ends or skips sections: no " + "; no ".join(missing) + " matrix")
    if not access:
        out.notes.append(
            "no 'Device=i CAN/CANNOT Access Peer Device=j' lines: peer access as the driver "
            "reports it is unknown (the connectivity matrix says it when present)"
        )
        if connectivity:
            access = {
                (i, j): bool(v)
                for i, row in enumerate(connectivity)
                for j, v in enumerate(row)
                if i != j
            }
            out.peer_access = _access_matrix(access, count)
    out.notes += access_notes(access, count)
    if matrices:  # which engine copied: said only where something was measured
        out.notes.append(_engine_note(sm_copy, any("--sm_copy" in line for line in lines)))
    out.failure_lines = scan(lines, source)
    return out


def _engine_note(sm_copy: bool, mentioned: bool) -> str:
    if sm_copy:
        return "engine: SM copies (--sm_copy on the command line)"
    return (
        "engine: copy engine, the tool's default (the output does not say; --sm_copy changes it"
        + (
            "; a line mentions --sm_copy but is not a command line running the test)"
            if mentioned
            else ")"
        )
    )


def _short(title: re.Match) -> str:
    direction = {"Uni": "Unidirectional ", "Bi": "Bidirectional "}.get(title["dir"] or "", "")
    return f"{direction}P2P={title['peer']} {title['metric']}"


def _devices(lines: list[str]) -> list[dict]:
    out: list[dict] = []
    for line in lines:
        m = _DEVICE.match(line.strip())
        if m and int(m["i"]) == len(out):
            out.append(
                {
                    "index": int(m["i"]),
                    "name": m["name"].strip(),
                    "pci_bus_id": f"{int(m['dom'], 16):04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.0",
                }
            )
    return out


def _access_lines(lines: list[str]) -> dict[tuple[int, int], bool]:
    found = {}
    for line in lines:
        m = _ACCESS.match(line.strip())
        if m:
            found[(int(m["i"]), int(m["j"]))] = m["can"] == "CAN"
    return found


def _access_matrix(access: dict, count: int) -> list[list[bool | None]]:
    return [[True if i == j else access.get((i, j)) for j in range(count)] for i in range(count)]


def _titled(
    lines: list[str], number: int, title: re.Match[str], count: int | None, sm_copy: bool
) -> tuple[list[Matrix], int]:
    what = lines[number].strip()
    metric = title["metric"].lower()
    attrs: dict[str, Any] = dict(
        metric=metric,
        direction="bidirectional" if title["dir"] == "Bi" else "unidirectional",
        peer_access=title["peer"].lower(),
        engine="sm" if sm_copy and title["peer"] == "Enabled" else "ce",
        access={"Writes": "write", "Reads": "read", None: None}[title["access"]],
    )
    try:
        (kind, cells), number = _block(lines, number + 1, count, what)
    except CutShort as cut:
        if cut.rows:
            padded = _padded(cut.rows, cut.expected or len(cut.rows))
            labels = gpu_labels(len(padded))
            source = f"p2pBandwidthLatencyTest: {what} (cut after row {len(cut.rows) - 1})"
            cut.matrices = [Matrix(rows=labels, cols=labels, values=padded, source=source, **attrs)]
        raise
    values: list[list[float | None]] = [list(row) for row in cells]
    timer = {"GPU": "gpu", "CPU": "cpu"}.get(kind) if metric == "latency" else None
    labels = gpu_labels(len(values))
    found = [
        Matrix(
            rows=labels,
            cols=labels,
            values=values,
            source=f"p2pBandwidthLatencyTest: {what}",
            timer=timer,
            **attrs,
        )
    ]
    if metric == "latency" and kind == "GPU":
        probe = number
        while probe < len(lines) and not lines[probe].strip():
            probe += 1
        header = _HEADER.match(lines[probe]) if probe < len(lines) else None
        if header and header["kind"] == "CPU":
            try:
                (_, cpu_cells), number = _block(lines, probe, len(values), what + " (CPU block)")
            except CutShort as cut:
                cut.matrices = found + [
                    Matrix(
                        rows=labels,
                        cols=labels,
                        values=_padded(cut.rows, len(values)),
                        timer="cpu",
                        source=f"p2pBandwidthLatencyTest: {what} (CPU timer, cut)",
                        **attrs,
                    )
                ] * bool(cut.rows)
                raise
            cpu: list[list[float | None]] = [list(row) for row in cpu_cells]
            found.append(
                Matrix(
                    rows=labels,
                    cols=labels,
                    values=cpu,
                    timer="cpu",
                    source=f"p2pBandwidthLatencyTest: {what} (CPU timer)",
                    **attrs,
                )
            )
    return found, number


def _block(
    lines: list[str], number: int, count: int | None, what: str, *, integers: bool = False
) -> tuple[tuple[str, list[list[float]]], int]:
    """The header line and the rows of one matrix starting at `number`; UsageProblem when cut short."""
    while number < len(lines) and not lines[number].strip():
        number += 1
    if number >= len(lines):
        raise CutShort(what, len(lines), [], None)
    header = _HEADER.match(lines[number])
    if not header and not _matrix_after(lines, number):  # stopped after the title (a failure?)
        raise CutShort(what, len(lines), [], None, stopped=_stopped(lines, number))
    if not header:
        raise UsageProblem(
            f"'{what}' has no matrix header after it (line {number + 1}): output cut short?"
        )
    cols = [int(c) for c in header["cols"].split()]
    if cols != list(range(len(cols))):
        raise UsageProblem(
            f"'{what}' header at line {number + 1} numbers its columns {cols}, not 0..N-1"
        )
    if count is not None and len(cols) != count:
        raise UsageProblem(
            f"'{what}' at line {number + 1} has {len(cols)} columns but the output lists "
            f"{count} devices: matrices of inconsistent sizes"
        )
    rows: list[list[float]] = []
    for index in range(len(cols)):
        at = number + 1 + index
        tokens = lines[at].split() if at < len(lines) else []
        cells = tokens[1:]
        good = (
            tokens
            and tokens[0] == str(index)
            and len(cells) == len(cols)
            and all(_NUMBER.match(c) for c in cells)
        )
        if not good and not _matrix_after(lines, at):  # the file ends here (cut, or stopped)
            raise CutShort(what, len(lines), rows, len(cols), stopped=_stopped(lines, at))
        if not good:
            raise UsageProblem(
                f"'{what}' is cut short or malformed at line {at + 1}: expected row {index} "
                f"with {len(cols)} numbers"
            )
        rows.append([int(c) if integers else float(c) for c in cells])
    return (header["kind"], rows), number + 1 + len(cols)


def _matrix_after(lines: list[str], at: int) -> bool:
    """Whether a matrix title or header follows line `at`: then a short matrix is broken, not cut."""
    return any(_TITLE.match(line.strip()) or _HEADER.match(line) for line in lines[at:])


def _stopped(lines: list[str], at: int) -> str | None:
    """The first line from `at` on that looks like a failure (the sample's `Cuda failure FILE:LINE:
    'reason'`), shown as printed (masked, escaped)."""
    return next((shown(line.strip()) for line in lines[at:] if looks_like_failure(line)), None)


def _padded(rows: list[list[float]], count: int) -> list[list[float | None]]:
    """A cut matrix's rows read, then empty rows (not measured in the file) up to its size."""
    read: list[list[float | None]] = [list(row) for row in rows]
    return read + [[None] * count for _ in range(count - len(rows))]
