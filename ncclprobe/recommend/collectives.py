"""Recommendations for several collectives at once, and the one environment that serves them all.

An NCCL environment variable applies to every collective of a process, so one setting has to
serve all-reduce, all-gather and the rest together: the combined choice is the configuration with
the least workload-weighted time summed over the collectives, significant only beyond the summed
noise. When the collectives' own best choices differ, that is a conflict: the tuner CSV (one row
per collective and size range) can give each its own choice, and is then the better vehicle. If the
combined setting would make any collective slower than its baseline beyond the noise, no global
change is recommended at all and the tuner CSV is the way.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.values import PER_COLLECTIVE_SINCE
from ncclprobe.nccl.version import parse_version
from ncclprobe.recommend.load import load_measurements
from ncclprobe.recommend.recommendation import SCHEMA_VERSION, Recommendation, build_recommendation
from ncclprobe.recommend.scope import ALGO, scope_algorithm
from ncclprobe.recommend.workload import Workload
from ncclprobe.records import Status, read_results, short_label
from ncclprobe.stats import DEFAULT_MIN_GAIN, gain, significant_totals
from ncclprobe.verdict import Verdict

TUNER_ADVICE = (
    "an environment variable applies to every collective, so prefer the tuner CSV, which sets each "
    "collective per size range: --emit tuner-csv"
)


@dataclass
class RecommendationSet:
    recs: list[Recommendation]
    env: dict[str, str]
    combined_id: str | None  # the combined choice (None: no global change)
    gain: float = 0.0
    conflicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(
        default_factory=dict
    )  # collective -> why it has no recommendation

    @property
    def change(self) -> bool:
        return self.combined_id is not None and any(
            self.combined_id != r.baseline_id for r in self.recs
        )

    def verdict(self) -> Verdict:
        """FINDINGS when a configuration was excluded for wrong results, a hang or an error."""
        return Verdict.of(
            any(
                e.status in (Status.WRONG, Status.HANG, Status.ERROR)
                for r in self.recs
                for e in r.measurements.excluded
            )
        )

    def to_json(self) -> dict:
        """One collective: that recommendation's own JSON (what `run-engine --tuned` has always read);
        several: the combined `env` and one entry per collective."""
        if len(self.recs) == 1 and not self.problems:
            return self.recs[0].to_json()
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "recommendation",
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "env": self.env,
            "change": self.change,
            "combined_config_id": self.combined_id,
            "combined_gain_pct": round(100 * self.gain, 3),
            "conflicts": self.conflicts,
            "notes": self.notes,
            "not_recommended": self.problems,
            "collectives": [r.to_json() for r in self.recs],
        }


def collectives_in(paths: list[str | Path]) -> list[str]:
    """Every collective the results measured, in the order first seen."""
    seen: dict[str, None] = {}
    for path in paths:
        for record in read_results(path).results:
            if record.collective:
                seen.setdefault(record.collective, None)
    return list(seen)


def build_recommendations(
    paths: list[str | Path],
    *,
    collectives: list[str] | None = None,
    workloads: dict[str, Workload | None] | None = None,
    mode: str | None = None,
    min_gain: float = DEFAULT_MIN_GAIN,
    allow_ll128: bool = False,
    baseline: dict[str, str] | None = None,
) -> RecommendationSet:
    files = [read_results(p) for p in paths]
    names = collectives or collectives_in(paths)
    if not names:
        raise UsageProblem(f"no results in {', '.join(map(str, paths))}")
    recs, problems = [], {}
    for name in names:
        try:
            measurements = load_measurements(paths, collective=name, mode=mode, files=files)
            recs.append(
                build_recommendation(
                    paths,
                    workload=(workloads or {}).get(name),
                    collective=name,
                    min_gain=min_gain,
                    allow_ll128=allow_ll128,
                    baseline=baseline,
                    measurements=measurements,
                )
            )
        except UsageProblem as exc:
            if len(names) == 1:
                raise
            problems[name] = str(exc)
    if not recs:
        raise UsageProblem(
            "no collective could be recommended: "
            + "; ".join(f"{k}: {v}" for k, v in problems.items())
        )
    return combine(recs, problems, min_gain)


def combine(
    recs: list[Recommendation], problems: dict[str, str], min_gain: float
) -> RecommendationSet:
    notes = [f"{name}: no recommendation ({why})" for name, why in problems.items()]
    if len(recs) == 1:
        rec = recs[0]
        return RecommendationSet(
            recs,
            rec.env,
            rec.overall.config_id if rec.change else None,
            rec.overall.gain,
            [],
            notes + list(rec.scoped.notes),
            problems,
        )
    bases = {r.baseline_id for r in recs}
    if len(bases) != 1 or any(r.comparison == "candidates" for r in recs):
        notes.append(
            "the collectives were not measured against one common baseline: no combined setting"
        )
        return RecommendationSet(recs, {}, None, 0.0, _conflicts(recs), notes, problems)
    base = bases.pop()
    totals = _combined_totals(recs, base)
    if base not in totals:
        return RecommendationSet(recs, {}, None, 0.0, _conflicts(recs), notes, problems)
    best = min(totals, key=lambda cid: totals[cid][0])
    combined_gain = gain(totals[best][0], totals[base][0])
    ok = best != base and significant_totals(totals[best], totals[base], min_gain=min_gain)
    conflicts = _conflicts(recs)
    chosen = best if ok else base
    hurt = [
        r.measurements.collective
        for r in recs
        if chosen != base
        and chosen in r.overall.totals_us
        and significant_totals(
            r.overall.totals_us[base], r.overall.totals_us[chosen], min_gain=min_gain
        )
    ]
    if hurt:
        notes.append(
            f"{short_label(recs[0].settings_of(chosen))} would save {100 * combined_gain:.1f}% over all "
            f"collectives but make {', '.join(hurt)} slower beyond the noise: no global change; {TUNER_ADVICE}"
        )
        chosen = base
    elif conflicts:
        notes.append(TUNER_ADVICE)
    settings = dict(sorted(_settings(recs, chosen).items())) if chosen != "default" else {}
    if chosen != base:
        faster = [
            r.measurements.collective
            for r in recs
            if chosen in r.overall.totals_us
            and significant_totals(
                r.overall.totals_us[chosen], r.overall.totals_us[base], min_gain=min_gain
            )
        ]
        scoped = scope_algorithm(settings, faster, recs[0].measurements.nccl_version)
        notes += scoped.notes
        if scoped.dropped and ALGO in settings:
            notes.append(
                f"{short_label(settings)} saves {100 * combined_gain:.1f}% summed over the collectives "
                f"but made no collective its {ALGO} governs faster on its own beyond the noise: it "
                f"would govern collectives it did not help, so no global change; {TUNER_ADVICE}"
            )
            chosen, settings = base, _settings(recs, base) if base != "default" else {}
        else:
            settings = scoped.env
    return RecommendationSet(
        recs,
        settings,
        chosen if chosen != base else None,
        combined_gain if chosen != base else 0.0,
        conflicts,
        notes,
        problems,
    )


def _combined_totals(
    recs: list[Recommendation], base: str
) -> dict[str, tuple[float, float, float]]:
    """Each configuration's workload total summed over the collectives, where it can serve them all:
    measured and safe for each, or differing from the baseline only in NCCL_ALGO, which NCCL 2.24+
    can leave off a collective (`scope`: that collective then runs as under the baseline, its own
    total counts)."""
    version = parse_version(recs[0].measurements.nccl_version)
    scopable = version is None or version >= PER_COLLECTIVE_SINCE
    base_settings = _settings(recs, base)
    totals: dict[str, tuple[float, float, float]] = {}
    for cid in dict.fromkeys(cid for r in recs for cid in r.overall.totals_us):
        settings = _settings(recs, cid)
        algo_only = scopable and {k: v for k, v in settings.items() if k != ALGO} == base_settings
        parts = [
            r.overall.totals_us.get(cid) or (r.overall.totals_us.get(base) if algo_only else None)
            for r in recs
        ]
        known = [p for p in parts if p is not None]
        if len(known) == len(parts):
            totals[cid] = (
                sum(p[0] for p in known),
                sum(p[1] for p in known),
                sum(p[2] for p in known),
            )
    return totals


def _settings(recs: list[Recommendation], cid: str) -> dict[str, str]:
    return next((r.settings_of(cid) for r in recs if cid in r.measurements.curves), {})


def _conflicts(recs: list[Recommendation]) -> list[str]:
    """One line when the collectives' own global choices differ."""
    choices = {r.measurements.collective: r.overall.config_id for r in recs}
    if len(set(choices.values())) <= 1:
        return []
    return [
        "the collectives' best settings differ: "
        + "; ".join(f"{name} {cid}" for name, cid in choices.items())
    ]
