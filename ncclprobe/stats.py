"""Per-rank times -> one result: the slowest rank decides (docs/METRICS.md).

A collective finishes when its slowest rank does, so each trial's time is the max over ranks;
the median over trials is `time_us`, with p10/p90 beside it. `rank_spread_us` keeps how far the
ranks' own medians were apart, which a max alone would hide. Per-iteration samples are taken the
same way (the slowest rank's k-th iteration) and summarised as nccl-tests `-I` does: min, p50,
p95, p99 (nearest rank, its `percentileIndex`), max, mean and the coefficient of variation.
`cpu_issue_us` is the slowest rank's median host issue time per call.
"""

from __future__ import annotations

import math
import statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def nearest_rank(ordered: list[float], q: int) -> float:
    """nccl-tests' percentile of sorted samples: index min(n-1, ceil(n*q/100)-1)."""
    n = len(ordered)
    return ordered[min(n - 1, max(0, (n * q + 99) // 100 - 1))]


def aggregate_trials(per_rank: dict[int, list[float]]) -> dict:
    """{rank: [trial times, µs]} -> time_us (median of per-trial max), p10, p90, rank spread."""
    ranks = sorted(per_rank)
    trials = min(len(per_rank[r]) for r in ranks)
    slowest = [max(per_rank[r][t] for r in ranks) for t in range(trials)]
    medians = [statistics.median(per_rank[r]) for r in ranks]
    return {
        "time_us": statistics.median(slowest),
        "time_us_p10": percentile(slowest, 10),
        "time_us_p90": percentile(slowest, 90),
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
        "p95_us": nearest_rank(ordered, 95),
        "p99_us": nearest_rank(ordered, 99),
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
