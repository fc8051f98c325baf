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

Noise: one rule for every "A is faster / slower than B" (docs/METRICS.md "The noise rule"). Each
side is a `Sample`: its median time and the spread of its repeats (p10..p90; a results record keeps
them per trial). A is faster than B when A's spread lies wholly below B's (they do not overlap) *and*
A saves at least a floor of B's time (`DEFAULT_MIN_GAIN`, 5 %: two quiet runs can still differ by a
few percent from one launch to the next). Slower is the same test the other way round, so a gain and
a loss need the same evidence. A side measured once has no spread of its own: the floor is then the
noise a single measurement of that kind is known to have (`SINGLE_MEASUREMENT_FLOOR`), never less
than the 5 %, and the verdict says it rests on that floor (`Comparison.basis`). Throughputs
(tokens/s) are compared as times per token (`Sample.of_rates`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields

DEFAULT_MIN_GAIN = 0.05
METHODS = ("linear", "nearest-rank")


def quantile(values, q: float, *, of: float = 1, method: str = "linear") -> float:
    """The `q / of` quantile of `values` (any order; at least one value).

    linear: between the two nearest samples at position (n-1)*q/of (numpy's default method);
    nearest-rank: the sample at index min(n-1, ceil(n*q/of)-1), nccl-tests' percentileIndex."""
    ordered = sorted(values)
    n = len(ordered)
    if method == "nearest-rank":
        return ordered[min(n - 1, max(0, int(-(-n * q // of)) - 1))]
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


@dataclass(frozen=True)
class TrialStats:
    """A measurement's trials as one result (the record's timing fields, docs/METRICS.md)."""

    time_us: float  # the median over trials of each trial's slowest rank
    time_us_p10: float
    time_us_p90: float
    rank_spread_us: float  # how far the ranks' own medians were apart
    trials: int


def aggregate_trials(per_rank: dict[int, list[float]]) -> TrialStats:
    """{rank: [trial times, µs]} -> time_us (median of per-trial max), p10, p90, rank spread."""
    ranks = sorted(per_rank)
    trials = min(len(per_rank[r]) for r in ranks)
    slowest = [max(per_rank[r][t] for r in ranks) for t in range(trials)]
    medians = [statistics.median(per_rank[r]) for r in ranks]
    return TrialStats(
        time_us=statistics.median(slowest),
        time_us_p10=quantile(slowest, 10, of=100),
        time_us_p90=quantile(slowest, 90, of=100),
        rank_spread_us=max(medians) - min(medians),
        trials=trials,
    )


@dataclass(frozen=True, kw_only=True)
class IterationStats:
    """The record's `iter`: per-iteration statistics of the slowest rank per iteration, as nccl-tests
    `-I` prints them. The sweep fills every field; nccl-tests' own output gives min, p99, max and the
    coefficient of variation only, so the rest may be None (and are then left out of the record)."""

    min_us: float | None = None
    p50_us: float | None = None
    p95_us: float | None = None
    p99_us: float | None = None
    max_us: float | None = None
    mean_us: float | None = None
    cv_pct: float | None = None
    samples: int | None = None
    clock: str | None = None

    @classmethod
    def from_json(cls, doc: dict) -> IterationStats:
        """From a record's `iter` (validated by its reader); keys this version does not know are
        left out."""
        return cls(**{f.name: doc[f.name] for f in fields(cls) if f.name in doc})

    def to_json(self) -> dict:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


def iteration_stats(per_rank: dict[int, list[float]], clock: str) -> IterationStats | None:
    """{rank: [per-iteration µs]} -> the `iter` record: statistics of the slowest rank per iteration."""
    ranks = sorted(per_rank)
    n = min(len(per_rank[r]) for r in ranks) if ranks else 0
    if n == 0:
        return None
    ordered = sorted(max(per_rank[r][i] for r in ranks) for i in range(n))
    mean = sum(ordered) / n
    stdev = math.sqrt(sum((t - mean) ** 2 for t in ordered) / n)
    return IterationStats(
        min_us=ordered[0],
        p50_us=ordered[n // 2],
        p95_us=quantile(ordered, 95, of=100, method="nearest-rank"),
        p99_us=quantile(ordered, 99, of=100, method="nearest-rank"),
        max_us=ordered[-1],
        mean_us=mean,
        cv_pct=100.0 * stdev / mean if mean > 0 else 0.0,
        samples=n,
        clock=clock,
    )


def issue_time(per_rank: dict[int, list[float]]) -> float | None:
    """The slowest rank's median host issue time per call (µs)."""
    medians = [statistics.median(v) for v in per_rank.values() if v]
    return max(medians) if medians else None


# ---- noise: is A faster or slower than B? ------------------------------------------------------

# The noise one measurement of each kind is known to have, for a side measured once (its spread is
# not known): an engine run's tokens/s on a GPU (run to run within about 3.5 % on the H200,
# docs/LOG.md) and on a shared CPU (the same tiny baseline ran 60-198 tok/s: only a factor of 2, a
# gain of half the time, is beyond it). A results record's time keeps its trials' spread (none for
# one trial), and its floor is the caller's `min_gain` (recommend --min-gain).
SINGLE_MEASUREMENT_FLOOR = {"gpu": DEFAULT_MIN_GAIN, "cpu": 0.5}
FASTER, SLOWER, WITHIN_NOISE = "faster", "slower", "within noise"
REPEATS, NOISE_FLOOR = "repeats", "noise floor"


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


@dataclass(frozen=True)
class Sample:
    """One side of a comparison as a time (lower is better): the median and the p10..p90 spread of
    its repeats; low == high == median when it was measured once."""

    median: float
    low: float
    high: float
    repeats: int = 1

    @classmethod
    def of_times(cls, values) -> Sample:
        """Repeated times: their median and linear p10..p90, the spread every trial record keeps."""
        values = list(values)
        return cls(
            statistics.median(values),
            quantile(values, 10, of=100),
            quantile(values, 90, of=100),
            len(values),
        )

    @classmethod
    def of_rates(cls, values) -> Sample:
        """Repeated rates (tokens/s) as times per unit: 1/rate, the fastest repeat the lowest time."""
        values = list(values)
        if min(values) <= 0:
            raise ValueError("rates must be positive")
        rates = Sample.of_times(values)
        return cls(1.0 / rates.median, 1.0 / rates.high, 1.0 / rates.low, rates.repeats)


@dataclass(frozen=True)
class Comparison:
    """The verdict of the noise rule on A against B, and what it rests on."""

    verdict: str  # FASTER | SLOWER | WITHIN_NOISE: A against B
    gain: float  # the share of B's time A saves (negative: A is slower)
    floor: float  # the least gain that counts here
    basis: str  # REPEATS: both sides' spreads; NOISE_FLOOR: a side measured once

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "basis": self.basis,
            "floor": self.floor,
            "gain": round(self.gain, 4),
        }

    def describe(self) -> str:
        """The rule as applied, in words: which evidence decided, and the floor."""
        if self.basis == REPEATS:
            return (
                f"judged by the repeats' p10-p90 spreads and the {self.floor:.0%} floor "
                "(docs/METRICS.md, the noise rule)"
            )
        return (
            f"one measurement on a side, no spread: judged by the {self.floor:.0%} noise floor of one "
            "such measurement (docs/METRICS.md, the noise rule)"
        )


def gain(candidate_us: float, default_us: float) -> float:
    """Fraction of the default's time saved: 0.25 = 25 % faster; negative = slower."""
    return (default_us - candidate_us) / default_us if default_us > 0 else 0.0


def compare(
    a: Sample,
    b: Sample,
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
    single: str | None = None,
) -> Comparison:
    """The one noise rule: A is faster than B when A's spread lies wholly below B's and A saves at
    least the floor of B's time; slower the same way round; else within the noise. `single` names
    the kind of measurement ("gpu", "cpu": an engine run) whose known noise is the floor when a side
    was measured once; None keeps `min_gain` (results records: their trials are their spread)."""
    both = a.repeats > 1 and b.repeats > 1
    floor = min_gain
    if not both and single is not None:
        floor = max(min_gain, SINGLE_MEASUREMENT_FLOOR[single])
    won = gain(a.median, b.median)
    if a.high < b.low and won >= floor:
        verdict = FASTER
    elif b.high < a.low and gain(b.median, a.median) >= floor:
        verdict = SLOWER
    else:
        verdict = WITHIN_NOISE
    return Comparison(verdict, won, floor, REPEATS if both else NOISE_FLOOR)


def significant(candidate: Point, default: Point, *, min_gain: float = DEFAULT_MIN_GAIN) -> bool:
    """True when `candidate` is faster than `default` by the noise rule (trial spreads, the floor)."""
    return compare(_sample(candidate), _sample(default), min_gain=min_gain).verdict == FASTER


def significant_totals(
    candidate: tuple[float, float, float],
    default: tuple[float, float, float],
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
) -> bool:
    """The same rule on workload totals given as (median, p10, p90) sums."""
    return compare(Sample(*candidate, 2), Sample(*default, 2), min_gain=min_gain).verdict == FASTER


def _sample(point: Point) -> Sample:
    return Sample(point.time_us, point.p10_us, point.p90_us, point.trials)


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
    return (
        _loglerp(lo_p.time_us, hi_p.time_us, t),
        _loglerp(lo_p.p10_us, hi_p.p10_us, t),
        _loglerp(lo_p.p90_us, hi_p.p90_us, t),
    )


def _loglerp(a: float, b: float, t: float) -> float:
    if a <= 0 or b <= 0:
        return a + (b - a) * t
    return math.exp(math.log(a) + (math.log(b) - math.log(a)) * t)
