"""Assemble a recommendation: measurements -> safe candidates -> per-size and global choices.

The baseline is the all-default configuration; the user may name another (`baseline=`, the
settings their job runs with today, for imported runs that never measured the default). With no
default and no baseline the candidates are compared with each other (`select.among_candidates`)
and the result says so. Safety applies unchanged in every mode (safety.py).

The JSON form (`to_json`) is the file `run-engine --tuned` and `env-check --expect-from` read:
they need only its `env` (the variables to export; empty when no change is recommended).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.recommendation_file import SCHEMA_VERSION
from ncclprobe.recommend import select
from ncclprobe.recommend.load import Measurements, load_measurements
from ncclprobe.recommend.safety import SafetyPolicy, refusals, timing_caveat
from ncclprobe.recommend.scope import Scoped, scope_algorithm
from ncclprobe.recommend.workload import Workload, uniform
from ncclprobe.records import config_id, short_label
from ncclprobe.stats import DEFAULT_MIN_GAIN

AGAINST_DEFAULT, AGAINST_BASELINE, AMONG_CANDIDATES = "default", "baseline", "candidates"


@dataclass
class Recommendation:
    measurements: Measurements
    workload: Workload
    min_gain: float
    refused: dict[str, list[str]]
    per_size: list[select.SizeChoice]
    ranges: list[select.SizeRange]
    overall: select.GlobalChoice
    notes: list[str] = field(default_factory=list)
    baseline_id: str = "default"  # what gains are measured against (NO_WINNER among candidates)
    comparison: str = AGAINST_DEFAULT

    @property
    def change(self) -> bool:
        return self.overall.config_id not in (self.baseline_id, select.NO_WINNER)

    @property
    def env(self) -> dict[str, str]:
        """The variables to export: the global choice's settings, NCCL_ALGO for this collective only
        (`scope`; {} = leave NCCL's defaults). Against a named baseline with no change, the
        baseline's own settings (what the job keeps running with)."""
        return self.scoped.env

    @property
    def scoped(self) -> Scoped:
        cid = self.overall.config_id if self.change or self.comparison == AGAINST_BASELINE else None
        curve = self.measurements.curves.get(cid) if cid else None
        settings = dict(sorted((curve.settings if curve else {}).items()))
        if not self.change:
            return Scoped(settings)
        ev = self.measurements
        return scope_algorithm(settings, [ev.collective], ev.nccl_version)

    @property
    def against(self) -> str:
        """What the gains are relative to, in words."""
        if self.comparison == AGAINST_BASELINE:
            return f"the baseline {short_label(self.settings_of(self.baseline_id))}"
        if self.comparison == AMONG_CANDIDATES:
            return "the next best candidate (no all-default run was measured)"
        return "the all-default configuration"

    def settings_of(self, cid: str) -> dict:
        curve = self.measurements.curves.get(cid)
        return dict(curve.settings) if curve else {}

    def to_json(self) -> dict:
        ev = self.measurements
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "recommendation",
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "env": self.env,
            "change": self.change,
            "comparison": self.comparison,
            "baseline": None if self.comparison == AMONG_CANDIDATES else self.baseline_id,
            "against": self.against,
            "collective": ev.collective,
            "mode": ev.mode,
            "dtype": ev.dtype,
            "op": ev.op,
            "nranks": ev.nranks,
            "global": _global_json(self.overall),
            "per_size": [_size_json(c) for c in self.per_size],
            "ranges": [_range_json(r, self.settings_of(r.config_id)) for r in self.ranges],
            "workload": {
                "source": self.workload.source,
                "sizes": [{"size_bytes": s, "count": c} for s, c in self.workload.counts.items()],
            },
            "excluded": [
                {
                    "config_id": e.config_id,
                    "settings": e.settings,
                    "status": e.status,
                    "reason": e.reason,
                }
                for e in ev.excluded
            ],
            "refused": [
                {"config_id": cid, "settings": self.settings_of(cid), "reasons": reasons}
                for cid, reasons in self.refused.items()
            ],
            "min_gain_pct": round(100 * self.min_gain, 3),
            "evidence": {
                "files": ev.paths,
                "nvlink": ev.nvlink,
                "node": ev.node.to_json() if ev.node else None,
                "nccl_version": ev.nccl_version,
                "runs": [_header_json(h) for h in ev.headers],
            },
            "notes": self.notes,
        }


def build_recommendation(
    paths: list[str | Path],
    *,
    workload: Workload | None = None,
    collective: str = "all_reduce",
    mode: str | None = None,
    min_gain: float = DEFAULT_MIN_GAIN,
    allow_ll128: bool = False,
    baseline: dict[str, str] | None = None,
    dtype: str | None = None,
    op: str | None = None,
    measurements: Measurements | None = None,
) -> Recommendation:
    """Read `paths` and decide. Raises UsageProblem when the named baseline (or, with none named and
    a default measured, the default) is unusable, or when fewer than two candidates are left."""
    measurements = measurements or load_measurements(
        paths, collective=collective, mode=mode, dtype=dtype, op=op
    )
    base_id = config_id(baseline) if baseline is not None else "default"
    base = measurements.curves.get(base_id)
    comparison = AGAINST_BASELINE if baseline is not None else AGAINST_DEFAULT
    if base is None:
        _check_missing_baseline(measurements, base_id, baseline)
        comparison = AMONG_CANDIDATES
    policy = SafetyPolicy(
        node=measurements.node,
        allow_ll128=allow_ll128,
        nccl_version=measurements.nccl_version,
        timing_caveat=timing_caveat(measurements.headers),
        collective=measurements.collective,
    )
    refused = {
        c.config_id: reasons
        for c in measurements.curves.values()
        if c.config_id != base_id
        and (
            reasons := refusals(
                c.settings, correctness_checked=c.correctness_checked, policy=policy
            )
        )
    }
    candidates = [
        c
        for c in measurements.curves.values()
        if c.config_id != base_id and c.config_id not in refused
    ]
    if base is None:
        if len(candidates) < 2:
            raise UsageProblem(
                f"no all-default {measurements.collective} run and fewer than two safe candidates to "
                "compare; name the baseline your job runs with today (--baseline NCCL_VAR=value,...)"
            )
        workload = workload or uniform(sorted({s for c in candidates for s in c.points}))
        choices, overall = select.among_candidates(candidates, workload, min_gain=min_gain)
    else:
        workload = workload or uniform(sorted(base.points))
        choices = select.per_size(base, candidates, min_gain=min_gain)
        overall = select.global_choice(base, candidates, workload, min_gain=min_gain)
    rec = Recommendation(
        measurements=measurements,
        workload=workload,
        min_gain=min_gain,
        refused=refused,
        per_size=choices,
        ranges=select.size_ranges(choices),
        overall=overall,
        baseline_id=select.NO_WINNER if base is None else base_id,
        comparison=comparison,
    )
    rec.notes = _notes(rec) + _baseline_notes(rec, base, policy) + list(rec.scoped.notes)
    return rec


def _check_missing_baseline(
    measurements: Measurements, base_id: str, baseline: dict | None
) -> None:
    bad = next((e for e in measurements.excluded if e.config_id == base_id), None)
    what = "the all-default configuration" if baseline is None else f"the baseline {base_id}"
    if bad is not None:
        raise UsageProblem(f"{what} is excluded ({bad.reason}); nothing can be compared against it")
    if baseline is not None:
        measured = ", ".join(sorted(measurements.curves)) or "none"
        raise UsageProblem(
            f"--baseline {base_id} was not measured for {measurements.collective} {measurements.mode} "
            f"(measured: {measured})"
        )


def _baseline_notes(rec: Recommendation, base, policy) -> list[str]:
    if rec.comparison == AMONG_CANDIDATES:
        return [
            "no all-default run: the candidates are compared with each other, so a gain is relative to the next "
            "best candidate, not to NCCL's defaults (measure the default, or name --baseline)"
        ]
    if rec.comparison == AGAINST_BASELINE:
        unsafe = refusals(
            base.settings,
            correctness_checked=base.correctness_checked,
            policy=SafetyPolicy(policy.node, policy.allow_ll128, policy.nccl_version),
        )
        return [f"the baseline itself would be refused here: {reason}" for reason in unsafe]
    return []


def _notes(rec: Recommendation) -> list[str]:
    notes = list(rec.overall.notes)
    points = [p for c in rec.measurements.curves.values() for p in c.points.values()]
    if points and all(p.trials <= 1 for p in points):
        notes.append(
            "the results carry no trial spread (one trial per size); "
            f"only gains of at least {100 * rec.min_gain:.0f}% count"
        )
    best = rec.overall.best_config_id
    if best not in (rec.baseline_id, select.NO_WINNER) and not rec.overall.significant:
        notes.append(
            f"{short_label(rec.settings_of(best))} is {100 * rec.overall.gain:.1f}% faster over the "
            "workload, inside the noise or below the floor: no change recommended"
        )
    share, mode = rec.workload.graphed_share, rec.measurements.mode
    if share is not None and (share > 0.5) != (mode == "graph"):
        other = "graph" if mode == "eager" else "eager"
        notes.append(
            f"{100 * share:.0f}% of the workload's collectives ran inside CUDA graphs but the choice used "
            f"{mode} measurements; pass --mode {other} if the sweep measured {other} mode"
        )
    if rec.workload.unknown_calls:
        notes.append(
            f"{rec.workload.unknown_calls:.0f} of the workload's calls were replayed from CUDA graphs whose "
            "capture the profile does not hold: their sizes are unknown and they are not weighed"
        )
    return notes + _refusal_notes(rec.refused)


def _refusal_notes(refused: dict[str, list[str]]) -> list[str]:
    """One note per reason, naming every configuration it refused (a gloo or --share-gpu caveat
    applies to all of them: say it once)."""
    by_reason: dict[str, list[str]] = {}
    for cid, reasons in refused.items():
        for reason in reasons:
            by_reason.setdefault(reason, []).append(cid)
    return [
        f"{cids[0]}: {reason}"
        if len(cids) == 1
        else f"{len(cids)} configurations ({'; '.join(cids)}): {reason}"
        for reason, cids in by_reason.items()
    ]


def _global_json(g: select.GlobalChoice) -> dict:
    return {
        "config_id": g.config_id,
        "best_config_id": g.best_config_id,
        "gain_pct": round(100 * g.gain, 3),
        "significant": g.significant,
        "totals_us": {
            cid: {"median": t[0], "p10": t[1], "p90": t[2]} for cid, t in g.totals_us.items()
        },
    }


def _size_json(c: select.SizeChoice) -> dict:
    return {
        "size_bytes": c.size_bytes,
        "fastest": c.fastest,
        "chosen": c.chosen,
        "time_us": c.time_us,
        "default_time_us": c.default_time_us,
        "gain_pct": round(100 * c.gain, 3),
        "noise_pct": round(100 * c.noise, 3),
        "significant": c.significant,
    }


def _range_json(r: select.SizeRange, settings: dict) -> dict:
    return {
        "min_size_bytes": r.min_size_bytes,
        "max_size_bytes": r.max_size_bytes,
        "config_id": r.config_id,
        "settings": settings,
        "gain_pct_min": round(100 * r.gain_min, 3),
        "gain_pct_max": round(100 * r.gain_max, 3),
    }


def _header_json(header: dict) -> dict:
    keys = (
        "kind",
        "started_at",
        "hostname",
        "versions",
        "gpus",
        "backend",
        "nranks",
        "topology",
        "env",
    )
    return {key: header.get(key) for key in keys}
