"""One nccl-tests run as ncclprobe holds it, whichever format it was read from: the text tables
(`nccl_tests`, split per run by `nccl_tests_split`) and -J JSON (`nccl_tests_json`) both give an
`NcclTestsRun` of `Row`s and `Measurement`s, which `nccl_tests_records` turns into result records.

Kept apart from the text reader because both readers build these and share what a run's facts
mean, whatever printed them: which of the NCCL variables found are the run's settings
(`nccl_settings`), the version an `ncclGetVersion` integer names, the collective a binary's name
names, and nccl-tests' type names as ncclprobe's dtypes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ncclprobe.evidence.failure_lines import FailureLines
from ncclprobe.nccl.recipes import only_shapes_the_log
from ncclprobe.secrets import mask_text
from ncclprobe.sizes import format_size

# not NCCL's settings: NVIDIA's containers set NCCL_VERSION to the NCCL they ship; NCCL_TESTS_* are
# nccl-tests' own (NCCL_TESTS_DEVICE, NCCL_TESTS_MIN_BW, NCCL_TESTS_SPLIT); NCCL_DEBUG* only shape the log
NOT_SETTINGS = ("NCCL_VERSION",)
TESTS_PREFIX = "NCCL_TESTS_"
# nccl-tests' type names (the table's `type` column, -J's "type") as ncclprobe's dtypes
DTYPES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}


@dataclass
class Measurement:
    time_us: float | None  # completion time per call (None when only -C's cputime was printed)
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None  # None when unchecked (-c 0) or in the old `error` format
    max_error: float | None = None  # the old `error` column
    cpu_time_us: float | None = None  # -C 1: the host's issue time per call
    iteration: dict | None = None  # -I 1: per-iteration statistics (our `iter` record)

    def to_json(self) -> dict:
        out: dict[str, object] = {
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
        }
        for key, value in (
            ("max_error", self.max_error),
            ("cpu_time_us", self.cpu_time_us),
            ("iter", self.iteration),
        ):
            if value is not None:
                out[key] = value
        return out


@dataclass
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None

    def to_json(self) -> dict:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.dtype,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_json() if self.out_of_place else None,
            "in_place": self.in_place.to_json() if self.in_place else None,
        }

    def measurements(self) -> list[tuple[bool, Measurement | None]]:
        return [(False, self.out_of_place), (True, self.in_place)]


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
    nccl_compiled_with: str | None = None  # nccl-tests 1.x: `# NCCL Tests compiled with NCCL 1.0`
    format: str = "current"  # "current" (#wrong column, v2.13+), "old" (error column) or "json"
    header: tuple[
        str, ...
    ] = ()  # the columns between type and time, as the table header names them
    settings: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the relevant environment, masked (-J files)
    notes: list[str] = field(default_factory=list)
    exported: dict | None = None  # what `ncclprobe export` wrote about its table
    failures: list[dict] = field(default_factory=list)  # explained failure classes (nccl_failures)
    warn_lines: list[str] = field(default_factory=list)  # NCCL WARN lines no class explains
    not_explained: FailureLines | None = None  # other lines that look like a failure

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "collective": self.collective,
            "collective_inferred": self.collective_inferred,
            "nranks": self.nranks,
            "nccl_version": self.nccl_version,
            "nccl_tests_version": self.nccl_tests_version,
            "nccl_compiled_with": self.nccl_compiled_with,
            "format": self.format,
            "params": dict(self.params),
            "devices": list(self.devices),
            "settings": dict(self.settings),
            "rows": [r.to_json() for r in self.rows],
            "avg_busbw_gbps": self.avg_busbw_gbps,
            "out_of_bounds": self.out_of_bounds,
            "notes": list(self.notes),
            "failures": list(self.failures),
            "warn_lines": [mask_text(w) for w in self.warn_lines],
            "not_explained": self.not_explained.to_json() if self.not_explained else None,
            "wrong_results": self.wrong_summary(),
        }

    @property
    def failed(self) -> bool:
        """The run stopped (no result row, or a failure a class explains as an error), or printed
        lines that look like a failure: never a clean run."""
        return (
            not self.rows
            or bool(self.failures)
            or bool(self.warn_lines)
            or bool(self.not_explained)
        )

    def wrong_summary(self) -> str | None:
        """What the run's checks found wrong: how many values, at which sizes, out of and in place
        (the `#wrong` columns), and the footer's out-of-bounds count. None when nothing was wrong."""
        placed: dict[str, list[int]] = {"out of place": [], "in place": []}
        count = 0
        for row in self.rows:
            for in_place, m in row.measurements():
                if m is not None and m.wrong is not None and m.wrong > 0:
                    placed["in place" if in_place else "out of place"].append(row.size_bytes)
                    count += m.wrong
        parts = [
            f"{where} at {len(sizes)} size(s) ({_sizes(sizes)})"
            for where, sizes in placed.items()
            if sizes
        ]
        if not parts and not self.out_of_bounds:
            return None
        checked = sum(
            1 for r in self.rows for _, m in r.measurements() if m and m.wrong is not None
        )
        text = (
            f"{count} wrong value(s): " + ", ".join(parts) + f", of {checked} checked results"
            if parts
            else "no row counted a wrong value"
        )
        if self.out_of_bounds:
            text += f"; the footer: {self.out_of_bounds} out-of-bounds value(s), FAILED"
        return text

    @property
    def wrong(self) -> bool:
        return bool(self.out_of_bounds) or any(
            (m.wrong or 0) > 0 for r in self.rows for _, m in r.measurements() if m
        )


def nccl_settings(found: dict[str, str]) -> dict[str, str]:
    """The NCCL variables that configure a run: NCCL_*, without the debug variables."""
    return {
        k: v
        for k, v in found.items()
        if k.startswith("NCCL_")
        and not only_shapes_the_log(k)
        and k not in NOT_SETTINGS
        and not k.startswith(TESTS_PREFIX)
    }


def nccl_version_of_code(code: int) -> str | None:
    """ncclGetVersion's integer as a version: X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before)."""
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    if 2000 <= code < 3000:
        return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
    return None


def collective_of_binary(name: str) -> str:
    """`./build/all_gather_perf_mpi` -> `all_gather`."""
    base = name.rsplit("/", 1)[-1]
    return re.sub(r"_perf(?:_mpi)?$", "", base)


def _sizes(sizes: list[int]) -> str:
    """`1K, 4K, 16K` for a few sizes, `128K..1G` for many."""
    ordered = sorted(set(sizes))
    if len(ordered) <= 4:
        return ", ".join(format_size(s) for s in ordered)
    return f"{format_size(ordered[0])}..{format_size(ordered[-1])}"
