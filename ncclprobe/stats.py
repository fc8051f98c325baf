"""The statistics every measurement shares: one quantile, trial aggregation, and the noise rule.

One home for the arithmetic the sweep, recommend, the custom all-reduce probe, the P2P probe, the
engine and the profile reader all use, so a percentile means the same thing everywhere.

`quantile` is the one quantile function. Its two methods are the two definitions the outputs
already use: "linear" (numpy's default, interpolating between the two nearest samples: trial
p10/p90, phase p90) and "nearest-rank" (nccl-tests' `percentileIndex`, a sample itself: the
per-iteration p95/p99 that `-I` prints). `q` is the fraction `q / of`; the sweep gives percents
(`of=100`) and the engine fractions, and the position is computed in that order so that both keep
the exact floats they always printed.

Trials: per-rank times -> one result, the slowest rank decides (docs/METRICS.md). A collective
finishes when its slowest rank does, so each trial's time is the max over ranks; the median over
trials is `time_us`, with p10/p90 beside it. `rank_spread_us` keeps how far the ranks' own medians
were apart, which a max alone would hide. Per-iteration samples are taken the same way (the
slowest rank's k-th iteration) and summarised as nccl-tests `-I` does: min, p50, p95, p99 (nearest
rank), max, mean and the coefficient of variation. `cpu_issue_us` is the slowest rank's median host
issue time per call.

Noise: a gain counts only when it clears the spread measured across trials. Each result record
carries the median time over its trials and the 10th/90th percentiles. A candidate beats the
default at a size only when its p90 is below the default's p10 (the two spreads do not overlap)
*and* the gain is at least a floor (`min_gain`, 5 % unless told), because a single-trial record
(imported nccl-tests output) has no spread at all and two quiet runs can still differ by a few
percent from one launch to the next.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

DEFAULT_MIN_GAIN = 0.05
METHODS = ("linear", "nearest-rank")


def quantile(values, q: float, *, of: float = 1, method: str = "linear") -> float:
    """The `q / of` quantile of `values` (any order; at least one value).

    linear: between the two nearest samples at position (n-1)*q/of (numpy's default method);
    nearest-rank: the sample at index min(n-1, ceil(n*q/of)-1), nccl-tests' percentileIndex."""
    ordered = sorted(values)
    n = len(ordered)
    if method == "nearest-rank":
        return ordered[min(n - 1, max(0, -(-n * q // of) - 1))]
    if method != "linear":
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    position = (n - 1) * q / of
    low = math.floor(position)
    high = min(low + 1, n - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median_and_range(values) -> tuple[float, float]:
    """The median and the full spread (max - min) of a few trials."""
    return statistics.median(values), max(values) - min(values)


# ---- trials: per-rank times -> one result ------------------------------------------------------


def aggregate_trials(per_rank: dict[int, list[float]]) -> dict:
    """{rank: [trial times, µs]} -> time_us (median of per-trial max), p10, p90, rank spread."""
    ranks = sorted(per_rank)
    trials = min(len(per_rank[r]) for r in ranks)
    slowest = [max(per_rank[r][t] for r in ranks) for t in range(trials)]
    medians = [statistics.median(per_rank[r]) for r in ranks]
    return {
        "time_us": statistics.median(slowest),
        "time_us_p10": quantile(slowest, 10, of=100),
        "time_us_p90": quantile(slowest, 90, of=100),
        "rank_spread_us": max(medians) - min(medians),
        "trials": trials,
    }


def iteration_stats(per_rank: dict[int, list[float]], clock: str) -> dict | None:
    """{rank: [per-iteration µs]} -> the `iter` record: statistics of the slowest rank per iteration."""
    ranks = sorted(per_rank)
    n = min(len(per_rank[r]) for r in ranks) if ranks else 0
    if n == 0:
        return None
    ordered = sorted(max(per_rank[r][i] for r in ranks) for i in range(n))
    mean = sum(ordered) / n
    stdev = math.sqrt(sum((t - mean) ** 2 for t in ordered) / n)
    return {
        "min_us": ordered[0],
        "p50_us": ordered[n // 2],
        "p95_us": quantile(ordered, 95, of=100, method="nearest-rank"),
        "p99_us": quantile(ordered, 99, of=100, method="nearest-rank"),
        "max_us": ordered[-1],
        "mean_us": mean,
        "cv_pct": 100.0 * stdev / mean if mean > 0 else 0.0,
        "samples": n,
        "clock": clock,
    }


def issue_time(per_rank: dict[int, list[float]]) -> float | None:
    """The slowest rank's median host issue time per call (µs)."""
    medians = [statistics.median(v) for v in per_rank.values() if v]
    return max(medians) if medians else None


# ---- noise: does a gain clear the spread? -----------------------------------------------------


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
    median = statistics.median(times)
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
