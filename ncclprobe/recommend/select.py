"""Choose: the fastest safe configuration per size, and one global setting for the workload.

Environment variables apply to every collective of a process, so the global choice is the one
configuration that minimises the workload-weighted total time -- sum over sizes of count x time,
the time interpolated log-log between measured sizes. A choice that does not clear the noise
(see ncclprobe.stats) leaves the baseline in place: "no change" is a valid, often the right, answer.

The baseline is the all-default configuration, or the one the user names (`--baseline`). With
neither, `among_candidates` compares the candidates with each other: the fastest wins only when it
beats the next best beyond the noise, and the result says it is relative to the candidates only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.recommend.load import Curve
from ncclprobe.recommend.workload import Workload
from ncclprobe.sizes import format_size
from ncclprobe.stats import Point, gain, interpolate, significant, significant_totals


@dataclass(frozen=True)
class SizeChoice:
    """At one measured size: the fastest safe configuration and whether its gain is real."""

    size_bytes: int
    fastest: str  # config_id of the fastest safe configuration (may be "default")
    time_us: float
    default_time_us: float
    gain: float  # fraction of the default's time saved by `fastest`
    noise: float  # the larger relative half-spread of the two
    significant: bool
    baseline: str = (
        "default"  # what `default_time_us` measured: the baseline, or NO_WINNER's next best
    )

    @property
    def chosen(self) -> str:
        return self.fastest if self.significant else self.baseline

    @property
    def verdict(self) -> str:
        """The one wording of this size's verdict, for the CLI's table and the report alike (the
        report said "keep default" where the CLI said "baseline fastest")."""
        if self.baseline == NO_WINNER:  # among candidates
            return "winner" if self.significant else "no clear winner"
        if self.significant:
            return "change"
        return "keep baseline" if self.fastest != self.baseline else "baseline fastest"


NO_WINNER = "none"  # among candidates, no configuration beat the next best beyond the noise


@dataclass(frozen=True)
class SizeRange:
    """Consecutive measured sizes with the same chosen configuration."""

    min_size_bytes: int
    max_size_bytes: int
    config_id: str
    gain_min: float
    gain_max: float


@dataclass
class GlobalChoice:
    """The one setting for every size, weighed by the workload."""

    config_id: str  # "default" when nothing clears the noise
    gain: float  # of the best total over the default total
    significant: bool
    best_config_id: str  # the best total, recommended or not
    totals_us: dict[str, tuple[float, float, float]] = field(
        default_factory=dict
    )  # (median, p10, p90)
    notes: list[str] = field(default_factory=list)


def per_size(default: Curve, candidates: list[Curve], *, min_gain: float) -> list[SizeChoice]:
    """One SizeChoice per size the default was measured at."""
    choices = []
    base_id = default.config_id
    for size, base in default.points.items():
        rivals = [(c.config_id, c.points[size]) for c in candidates if size in c.points]
        best_id, best = min(rivals + [(base_id, base)], key=lambda pair: pair[1].time_us)
        choices.append(
            SizeChoice(
                size_bytes=size,
                fastest=best_id,
                time_us=best.time_us,
                default_time_us=base.time_us,
                gain=gain(best.time_us, base.time_us),
                noise=max(best.noise, base.noise),
                significant=best_id != base_id and significant(best, base, min_gain=min_gain),
                baseline=base_id,
            )
        )
    return choices


def among_candidates(
    curves: list[Curve], workload: Workload, *, min_gain: float
) -> tuple[list[SizeChoice], GlobalChoice]:
    """No baseline: per size the fastest against the next best; globally the best total against the
    next best total. A winner must clear the noise against the runner-up, else NO_WINNER."""
    choices = []
    for size in sorted({s for c in curves for s in c.points}):
        ranked = sorted(
            ((c.config_id, c.points[size]) for c in curves if size in c.points),
            key=lambda p: p[1].time_us,
        )
        if len(ranked) < 2:
            continue
        (best_id, best), (_, runner) = ranked[0], ranked[1]
        choices.append(
            SizeChoice(
                size_bytes=size,
                fastest=best_id,
                time_us=best.time_us,
                default_time_us=runner.time_us,
                gain=gain(best.time_us, runner.time_us),
                noise=max(best.noise, runner.noise),
                significant=significant(best, runner, min_gain=min_gain),
                baseline=NO_WINNER,
            )
        )
    sizes = sorted(set.intersection(*(set(c.points) for c in curves))) if curves else []
    totals = (
        {c.config_id: _total({s: c.points[s] for s in sizes}, workload) for c in curves}
        if sizes
        else {}
    )
    notes = [] if sizes else ["the candidates share no measured size: no global comparison"]
    order = sorted(totals, key=lambda cid: totals[cid][0])
    if len(order) < 2:
        return choices, GlobalChoice(
            NO_WINNER, 0.0, False, order[0] if order else NO_WINNER, totals, notes
        )
    top, second = order[0], order[1]
    ok = significant_totals(totals[top], totals[second], min_gain=min_gain)
    return choices, GlobalChoice(
        config_id=top if ok else NO_WINNER,
        gain=gain(totals[top][0], totals[second][0]),
        significant=ok,
        best_config_id=top,
        totals_us=totals,
        notes=notes + [f"compared among candidates: {top} against the next best, {second}"],
    )


def size_ranges(choices: list[SizeChoice]) -> list[SizeRange]:
    """Group consecutive sizes by their chosen configuration."""
    ranges: list[SizeRange] = []
    for choice in choices:
        last = ranges[-1] if ranges else None
        if last and last.config_id == choice.chosen:
            ranges[-1] = SizeRange(
                last.min_size_bytes,
                choice.size_bytes,
                last.config_id,
                min(last.gain_min, choice.gain),
                max(last.gain_max, choice.gain),
            )
        else:
            ranges.append(
                SizeRange(
                    choice.size_bytes, choice.size_bytes, choice.chosen, choice.gain, choice.gain
                )
            )
    return ranges


def global_choice(
    default: Curve, candidates: list[Curve], workload: Workload, *, min_gain: float
) -> GlobalChoice:
    """The configuration with the least weighted total time; default unless it clears the noise."""
    notes = _coverage_notes(default, workload)
    complete = [c for c in candidates if set(default.points) <= set(c.points)]
    for c in candidates:
        if c not in complete:
            missing = sorted(set(default.points) - set(c.points))
            notes.append(
                f"{c.config_id} left out of the global choice: not measured at "
                f"{', '.join(format_size(s) for s in missing[:5])}"
            )
    base_id = default.config_id
    totals = {c.config_id: _total(c.points, workload) for c in [default] + complete}
    best_id = min(totals, key=lambda cid: totals[cid][0])
    best_gain = gain(totals[best_id][0], totals[base_id][0])
    ok = best_id != base_id and significant_totals(
        totals[best_id], totals[base_id], min_gain=min_gain
    )
    return GlobalChoice(
        config_id=best_id if ok else base_id,
        gain=best_gain,
        significant=ok,
        best_config_id=best_id,
        totals_us=totals,
        notes=notes,
    )


def _total(points: dict[int, Point], workload: Workload) -> tuple[float, float, float]:
    sums = [0.0, 0.0, 0.0]
    for size, count in workload.counts.items():
        values = interpolate(points, size)
        if values is None:
            raise ValueError("a curve without points has no total")
        for i in range(3):
            sums[i] += count * values[i]
    return sums[0], sums[1], sums[2]


def _coverage_notes(default: Curve, workload: Workload) -> list[str]:
    lo, hi = min(default.points), max(default.points)
    outside = [s for s in workload.counts if s < lo or s > hi]
    if not outside:
        return []
    return [
        f"{len(outside)} workload sizes lie outside the measured {format_size(lo)}..{format_size(hi)} "
        f"(e.g. {format_size(outside[0])}); they were costed at the nearest measured size -- "
        "sweep those sizes for a firmer answer"
    ]
