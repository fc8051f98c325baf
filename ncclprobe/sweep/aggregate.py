"""Per-rank trial times -> one result: the slowest rank decides each trial (docs/METRICS.md).

A collective finishes when its slowest rank does, so each trial's time is the max over ranks;
the median over trials is `time_us`, with p10/p90 beside it. `rank_spread_us` keeps how far the
ranks' own medians were apart, which a max alone would hide.
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


def aggregate_trials(per_rank: dict[int, list[float]]) -> dict:
    """{rank: [trial times, µs]} -> time_us (median of per-trial max), p10, p90, rank spread."""
    ranks = sorted(per_rank)
    trials = min(len(per_rank[r]) for r in ranks)
    slowest = [max(per_rank[r][t] for r in ranks) for t in range(trials)]
    medians = [statistics.median(per_rank[r]) for r in ranks]
    return {"time_us": statistics.median(slowest), "time_us_p10": percentile(slowest, 10),
            "time_us_p90": percentile(slowest, 90), "rank_spread_us": max(medians) - min(medians),
            "trials": trials}
