"""One record format for every GPU x GPU (or CPU x GPU) matrix, whoever measured it.

`topo --check`, p2pBandwidthLatencyTest and nvbandwidth all become `Matrix` records, so the findings
in `ncclprobe.diagnose.p2p.findings` read one shape. A record names what was measured (metric, direction,
peer access, copy engine or SM copy, write or read), its unit, its row and column labels, and the
values (None where the tool printed N/A or did not measure). Diagonals are same-device copies,
not pairs: findings skip them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem

SCHEMA_VERSION = 1
METRICS = {"bandwidth": "GB/s", "latency": "us"}
DIRECTIONS = ("unidirectional", "bidirectional")
PEER_STATES = ("enabled", "disabled")
ENGINES = ("ce", "sm")
ACCESSES = ("write", "read")


@dataclass
class Matrix:
    metric: str  # "bandwidth" | "latency"
    rows: list[str]  # labels: GPU0.. or CPU
    cols: list[str]
    values: list[list[float | None]]
    direction: str = "unidirectional"
    peer_access: str | None = None  # "enabled" | "disabled" | None (not applicable / not said)
    engine: str | None = None  # "ce" (copy engine) | "sm" (kernel copy) | None (not said)
    access: str | None = None  # "write" | "read" | None
    source: str = ""  # tool and title as printed
    timer: str | None = None  # latency only: "gpu" (events) | "cpu" (host wall clock)
    spread: list[list[float | None]] | None = (
        None  # measured here: (max - min) over trials, same unit
    )
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def unit(self) -> str:
        return METRICS[self.metric]

    @property
    def square(self) -> bool:
        return self.rows == self.cols

    @property
    def label(self) -> str:
        """Short name for tables and findings: `bandwidth uni P2P=enabled ce write`."""
        parts = [self.metric, "uni" if self.direction == "unidirectional" else "bidi"]
        if self.peer_access:
            parts.append(f"P2P={self.peer_access}")
        parts += [p for p in (self.engine, self.access, self.timer and f"{self.timer} timer") if p]
        return " ".join(parts)

    def pairs(self) -> Iterator[tuple[int, int, float]]:
        """(row, col, value) for every off-diagonal cell with a value."""
        for i, row in enumerate(self.values):
            for j, value in enumerate(row):
                if value is not None and not (self.square and i == j):
                    yield i, j, value

    def to_record(self) -> dict:
        record = {
            "record": "matrix",
            "schema_version": SCHEMA_VERSION,
            "metric": self.metric,
            "unit": self.unit,
            "direction": self.direction,
            "peer_access": self.peer_access,
            "engine": self.engine,
            "access": self.access,
            "timer": self.timer,
            "source": self.source,
            "rows": list(self.rows),
            "cols": list(self.cols),
            "values": [list(r) for r in self.values],
        }
        if self.spread is not None:
            record["spread"] = [list(r) for r in self.spread]
        if self.extra:
            record["extra"] = dict(self.extra)
        return record

    @classmethod
    def from_record(cls, record: dict) -> Matrix:
        if not isinstance(record, dict) or record.get("record") != "matrix":
            raise UsageProblem('not a matrix record (expected "record": "matrix")')
        if record.get("schema_version") != SCHEMA_VERSION:
            raise UsageProblem(
                f"matrix record schema version {record.get('schema_version')!r}; "
                f"this ncclprobe reads {SCHEMA_VERSION}"
            )
        known = (
            "metric",
            "rows",
            "cols",
            "values",
            "direction",
            "peer_access",
            "engine",
            "access",
            "source",
            "timer",
            "spread",
            "extra",
        )
        try:
            return cls(**{k: record[k] for k in known if k in record})
        except TypeError as exc:
            raise UsageProblem(f"matrix record is missing a field: {exc}") from exc


def validate(m: Matrix) -> None:
    """One line naming what is wrong; a matrix that passes has consistent shape and finite values."""
    if m.metric not in METRICS:
        raise UsageProblem(f"matrix metric {m.metric!r} is not one of {', '.join(METRICS)}")
    for name, value, allowed in (
        ("direction", m.direction, DIRECTIONS),
        ("peer_access", m.peer_access, PEER_STATES),
        ("engine", m.engine, ENGINES),
        ("access", m.access, ACCESSES),
    ):
        if value is not None and value not in allowed:
            raise UsageProblem(f"matrix {name} {value!r} is not one of {', '.join(allowed)}")
    if not m.rows or not m.cols:
        raise UsageProblem(f"{m.source or 'matrix'}: no rows or no columns")
    for grid, what in ((m.values, "values"), (m.spread, "spread")):
        if grid is None:
            continue
        if len(grid) != len(m.rows) or any(
            not isinstance(r, list) or len(r) != len(m.cols) for r in grid
        ):
            raise UsageProblem(
                f"{m.source or 'matrix'}: {what} are not {len(m.rows)} x {len(m.cols)} "
                f"as the labels say"
            )
        for row in grid:
            for v in row:
                if v is not None and (
                    isinstance(v, bool)
                    or not isinstance(v, (int, float))
                    or not math.isfinite(v)
                    or v < 0
                ):
                    raise UsageProblem(
                        f"{m.source or 'matrix'}: {what} hold {v!r}, not a finite number >= 0"
                    )


def gpu_labels(count: int) -> list[str]:
    return [f"GPU{i}" for i in range(count)]


def rows_for_table(m: Matrix, digits: int = 2) -> list[dict]:
    """The matrix as table rows (row label, then one column per column label)."""
    out = []
    for label, row in zip(m.rows, m.values):
        entry: dict[str, str | float | None] = {m.unit: label}
        entry.update({c: (None if v is None else round(v, digits)) for c, v in zip(m.cols, row)})
        out.append(entry)
    return out
