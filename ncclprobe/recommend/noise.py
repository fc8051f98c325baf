"""Run-to-run noise: a gain counts only when it clears the spread measured across trials.

Each result record carries the median time over its trials and the 10th/90th percentiles. A
candidate beats the default at a size only when its p90 is below the default's p10 (the two
spreads do not overlap) *and* the gain is at least a floor (`min_gain`, 5 % unless told), because
a single-trial record (imported nccl-tests output) has no spread at all and two quiet runs can
still differ by a few percent from one launch to the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MIN_GAIN = 0.05


@dataclass(frozen=True)
class Point:
    """One configuration at one size: median time and its trial spread (microseconds)."""

    size_bytes: int
    time_us: float
    p10_us: float  # equals time_us when the record had one trial or no spread
    p90_us: float
    busbw_gbps: float | None = None
    trials: int = 1

    @property
    def noise(self) -> float:
        """Half the p10..p90 spread relative to the median: 0.04 means +/- 4 %."""
        return (self.p90_us - self.p10_us) / (2 * self.time_us) if self.time_us > 0 else 0.0


def gain(candidate_us: float, default_us: float) -> float:
    """Fraction of the default's time saved: 0.25 = 25 % faster; negative = slower."""
    return (default_us - candidate_us) / default_us if default_us > 0 else 0.0


def significant(candidate: Point, default: Point, *, min_gain: float = DEFAULT_MIN_GAIN) -> bool:
    """True when `candidate` is faster than `default` beyond both the trial spread and the floor."""
    return (
        candidate.p90_us < default.p10_us and gain(candidate.time_us, default.time_us) >= min_gain
    )


def significant_totals(
    candidate: tuple[float, float, float],
    default: tuple[float, float, float],
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
) -> bool:
    """The same test on workload totals given as (median, p10, p90) sums."""
    return candidate[2] < default[1] and gain(candidate[0], default[0]) >= min_gain


def merge(points: list[Point]) -> Point:
    """Several measurements of one configuration at one size (in-place and out-of-place, two
    files): the median of the medians, and the widest spread, so merging never hides noise."""
    times = sorted(p.time_us for p in points)
    middle = len(times) // 2
    median = times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
    bws = [p.busbw_gbps for p in points if p.busbw_gbps is not None]
    return Point(
        size_bytes=points[0].size_bytes,
        time_us=median,
        p10_us=min(min(p.p10_us for p in points), times[0]),
        p90_us=max(max(p.p90_us for p in points), times[-1]),
        busbw_gbps=max(bws) if bws else None,
        trials=sum(p.trials for p in points),
    )


def interpolate(points: dict[int, Point], size: int) -> tuple[float, float, float] | None:
    """(median, p10, p90) at `size`, log-log between the two nearest measured sizes.

    Sizes outside the measured range are clamped to the nearest end (returned as is): callers
    say so in their notes. None when there are no points.
    """
    if not points:
        return None
    sizes = sorted(points)
    if size <= sizes[0]:
        p = points[sizes[0]]
        return p.time_us, p.p10_us, p.p90_us
    if size >= sizes[-1]:
        p = points[sizes[-1]]
        return p.time_us, p.p10_us, p.p90_us
    upper = next(s for s in sizes if s >= size)
    lower = sizes[sizes.index(upper) - 1] if upper != size else upper
    if lower == upper:
        p = points[upper]
        return p.time_us, p.p10_us, p.p90_us
    t = (math.log(size) - math.log(lower)) / (math.log(upper) - math.log(lower))
    lo_p, hi_p = points[lower], points[upper]
    return tuple(
        _loglerp(a, b, t)
        for a, b in (
            (lo_p.time_us, hi_p.time_us),
            (lo_p.p10_us, hi_p.p10_us),
            (lo_p.p90_us, hi_p.p90_us),
        )
    )


def _loglerp(a: float, b: float, t: float) -> float:
    if a <= 0 or b <= 0:
        return a + (b - a) * t
    return math.exp(math.log(a) + (math.log(b) - math.log(a)) * t)
