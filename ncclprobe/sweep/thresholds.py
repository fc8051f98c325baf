"""Pass/fail thresholds for CI and fleet checks (nccl-tests' NCCL_TESTS_MIN_BW, made per size).

`--min-busbw GBPS[@SIZE]`: every ok measurement at SIZE (default: the largest size measured, where
bandwidth means something) must reach GBPS of bus bandwidth. `--max-latency US[@SIZE]`: every ok
measurement at SIZE (default: the smallest size measured) must take at most US microseconds. Each
shortfall is one line naming the collective, configuration, mode, placement and size; any makes
the sweep exit 1. A size given that was not measured is a shortfall too: nothing was shown to pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import parse_float
from ncclprobe.records import ResultRecord, Status
from ncclprobe.sizes import format_size, parse_size
from ncclprobe.textenum import TextEnum


class Metric(TextEnum):
    BUSBW = "busbw_gbps"  # at least the limit
    TIME = "time_us"  # at most the limit


@dataclass(frozen=True)
class Criterion:
    metric: Metric
    limit: float
    size_bytes: int | None  # None: the largest (busbw) or smallest (latency) size measured

    def describe(self) -> str:
        where = (
            format_size(self.size_bytes)
            if self.size_bytes
            else ("the largest size" if self.metric is Metric.BUSBW else "the smallest size")
        )
        return (
            f"busbw >= {self.limit:g} GB/s"
            if self.metric is Metric.BUSBW
            else f"time <= {self.limit:g} us"
        ) + f" at {where}"

    def value(self, record: ResultRecord) -> float | None:
        return record.busbw_gbps if self.metric is Metric.BUSBW else record.time_us

    def missed(self, value: float | None) -> bool:
        if value is None:
            return True
        return value < self.limit if self.metric is Metric.BUSBW else value > self.limit


def parse(min_busbw: str | None, max_latency: str | None) -> list[Criterion]:
    out = []
    for flag, text, metric in (
        ("--min-busbw", min_busbw, Metric.BUSBW),
        ("--max-latency", max_latency, Metric.TIME),
    ):
        if text is not None:
            out.append(_parse_one(flag, text, metric))
    return out


def _parse_one(flag: str, text: str, metric: Metric) -> Criterion:
    value, at, size = text.partition("@")
    try:
        if at and not size:  # `5@`: a size was meant and is missing
            raise UsageProblem(flag)
        limit = parse_float(value, flag, min=0, min_open=True)  # ASCII, finite: ncclprobe.numbers
    except UsageProblem:
        raise UsageProblem(
            f"{flag} {text!r}: expected a positive finite number, optionally @SIZE (like 100@1G)"
        ) from None
    return Criterion(metric, limit, parse_size(size) if size else None)


def check(results: list[ResultRecord], criteria: list[Criterion]) -> list[str]:
    """One line per measurement that misses a criterion."""
    lines = []
    ok = [r for r in results if r.status == Status.OK and r.time_us]
    for criterion in criteria:
        lines += _check_one(ok, criterion)
    return lines


def _check_one(ok: list[ResultRecord], criterion: Criterion) -> list[str]:
    by_collective: dict[str, list[ResultRecord]] = {}
    for r in ok:
        by_collective.setdefault(str(r.collective), []).append(r)
    lines = []
    for collective, records in sorted(by_collective.items()):
        sizes = sorted({r.size_bytes for r in records})
        size = criterion.size_bytes or (sizes[-1] if criterion.metric is Metric.BUSBW else sizes[0])
        at = [r for r in records if r.size_bytes == size]
        if not at:
            lines.append(
                f"threshold {criterion.describe()}: {collective} was not measured at {format_size(size)}"
            )
            continue
        for r in at:
            value = criterion.value(r)
            if criterion.missed(value):
                unit = "GB/s" if criterion.metric is Metric.BUSBW else "us"
                what = " ".join(
                    str(x)
                    for x in (
                        collective,
                        r.op,
                        r.dtype,
                        r.config_id,
                        r.mode,
                        "in place" if r.in_place else "out of place",
                    )
                    if x
                )
                lines.append(
                    f"threshold {criterion.describe()} missed: {what} {format_size(size)}: "
                    f"{'n/a' if value is None else f'{value:.4g}'} {unit}"
                )
    return lines
