"""Assemble a recommendation: evidence -> safe candidates -> per-size and global choices.

The JSON form (`to_json`) is the file `run-engine --tuned` and `env-check --expect-from` read:
they need only its `env` (the variables to export; empty when no change is recommended).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.recommend import select
from ncclprobe.recommend.load import Evidence, load_evidence
from ncclprobe.recommend.noise import DEFAULT_MIN_GAIN
from ncclprobe.recommend.safety import SafetyPolicy, refusals, timing_caveat
from ncclprobe.recommend.workload import Workload, uniform
from ncclprobe.records import short_label

SCHEMA_VERSION = 1


@dataclass
class Recommendation:
    evidence: Evidence
    workload: Workload
    min_gain: float
    refused: dict[str, list[str]]
    per_size: list[select.SizeChoice]
    ranges: list[select.SizeRange]
    overall: select.GlobalChoice
    notes: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The variables to export: the global choice's settings ({} = leave NCCL's defaults)."""
        curve = self.evidence.curves.get(self.overall.config_id)
        return dict(sorted((curve.settings if curve else {}).items()))

    def settings_of(self, cid: str) -> dict:
        curve = self.evidence.curves.get(cid)
        return dict(curve.settings) if curve else {}

    def to_json(self) -> dict:
        ev = self.evidence
        return {
            "schema_version": SCHEMA_VERSION, "kind": "recommendation",
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "env": self.env, "change": bool(self.env),
            "collective": ev.collective, "mode": ev.mode, "nranks": ev.nranks,
            "global": _global_json(self.overall),
            "per_size": [_size_json(c) for c in self.per_size],
            "ranges": [_range_json(r, self.settings_of(r.config_id)) for r in self.ranges],
            "workload": {"source": self.workload.source,
                         "sizes": [{"size_bytes": s, "count": c} for s, c in self.workload.counts.items()]},
            "excluded": [{"config_id": e.config_id, "settings": e.settings, "status": e.status, "reason": e.reason}
                         for e in ev.excluded],
            "refused": [{"config_id": cid, "settings": self.settings_of(cid), "reasons": reasons}
                        for cid, reasons in self.refused.items()],
            "min_gain_pct": round(100 * self.min_gain, 3),
            "evidence": {"files": ev.paths, "nvlink": ev.nvlink, "node": ev.node.to_json() if ev.node else None,
                         "nccl_version": ev.nccl_version,
                         "runs": [_header_json(h) for h in ev.headers]},
            "notes": self.notes,
        }


def build_recommendation(paths: list[str | Path], *, workload: Workload | None = None,
                         collective: str = "all_reduce", mode: str | None = None,
                         min_gain: float = DEFAULT_MIN_GAIN, allow_ll128: bool = False) -> Recommendation:
    """Read `paths` and decide. Raises UsageProblem when there is no usable default to compare with."""
    evidence = load_evidence(paths, collective=collective, mode=mode)
    default = evidence.default
    if default is None:
        raise UsageProblem(_no_default_message(evidence))
    policy = SafetyPolicy(node=evidence.node, allow_ll128=allow_ll128, nccl_version=evidence.nccl_version,
                          timing_caveat=timing_caveat(evidence.headers))
    refused = {c.config_id: reasons for c in evidence.curves.values()
               if c.config_id != "default"
               and (reasons := refusals(c.settings, correctness_checked=c.correctness_checked, policy=policy))}
    candidates = [c for c in evidence.curves.values() if c.config_id != "default" and c.config_id not in refused]
    workload = workload or uniform(sorted(default.points))
    choices = select.per_size(default, candidates, min_gain=min_gain)
    overall = select.global_choice(default, candidates, workload, min_gain=min_gain)
    rec = Recommendation(evidence=evidence, workload=workload, min_gain=min_gain, refused=refused,
                         per_size=choices, ranges=select.size_ranges(choices), overall=overall)
    rec.notes = _notes(rec)
    return rec


def _no_default_message(evidence: Evidence) -> str:
    bad = next((e for e in evidence.excluded if e.config_id == "default"), None)
    if bad is not None:
        return f"the all-default configuration is excluded ({bad.reason}); nothing can be compared against it"
    return ("the results have no all-default configuration (settings {}) to measure gains against; "
            "sweep again including the default")


def _notes(rec: Recommendation) -> list[str]:
    notes = list(rec.overall.notes)
    if all(p.trials <= 1 for p in rec.evidence.default.points.values()):
        notes.append("the results carry no trial spread (one trial per size); "
                     f"only gains of at least {100 * rec.min_gain:.0f}% count")
    best = rec.overall.best_config_id
    if best != "default" and not rec.overall.significant:
        notes.append(f"{short_label(rec.settings_of(best))} is {100 * rec.overall.gain:.1f}% faster over the "
                     "workload, inside the noise or below the floor: no change recommended")
    share, mode = rec.workload.graphed_share, rec.evidence.mode
    if share is not None and (share > 0.5) != (mode == "graph"):
        other = "graph" if mode == "eager" else "eager"
        notes.append(f"{100 * share:.0f}% of the workload's collectives ran inside CUDA graphs but the choice used "
                     f"{mode} measurements; pass --mode {other} if the sweep measured {other} mode")
    if rec.workload.unknown_calls:
        notes.append(f"{rec.workload.unknown_calls:.0f} of the workload's calls were replayed from CUDA graphs whose "
                     "capture the profile does not hold: their sizes are unknown and they are not weighed")
    return notes + _refusal_notes(rec.refused)


def _refusal_notes(refused: dict[str, list[str]]) -> list[str]:
    """One note per reason, naming every configuration it refused (a gloo or --share-gpu caveat
    applies to all of them: say it once)."""
    by_reason: dict[str, list[str]] = {}
    for cid, reasons in refused.items():
        for reason in reasons:
            by_reason.setdefault(reason, []).append(cid)
    return [f"{cids[0]}: {reason}" if len(cids) == 1 else f"{len(cids)} configurations ({'; '.join(cids)}): {reason}"
            for reason, cids in by_reason.items()]


def _global_json(g: select.GlobalChoice) -> dict:
    return {"config_id": g.config_id, "best_config_id": g.best_config_id, "gain_pct": round(100 * g.gain, 3),
            "significant": g.significant,
            "totals_us": {cid: {"median": t[0], "p10": t[1], "p90": t[2]} for cid, t in g.totals_us.items()}}


def _size_json(c: select.SizeChoice) -> dict:
    return {"size_bytes": c.size_bytes, "fastest": c.fastest, "chosen": c.chosen, "time_us": c.time_us,
            "default_time_us": c.default_time_us, "gain_pct": round(100 * c.gain, 3),
            "noise_pct": round(100 * c.noise, 3), "significant": c.significant}


def _range_json(r: select.SizeRange, settings: dict) -> dict:
    return {"min_size_bytes": r.min_size_bytes, "max_size_bytes": r.max_size_bytes, "config_id": r.config_id,
            "settings": settings, "gain_pct_min": round(100 * r.gain_min, 3), "gain_pct_max": round(100 * r.gain_max, 3)}


def _header_json(header: dict) -> dict:
    keys = ("kind", "started_at", "hostname", "versions", "gpus", "backend", "nranks", "topology", "env")
    return {key: header.get(key) for key in keys}
