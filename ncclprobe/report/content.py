"""What a report says, independent of how it is written: sections of text, tables, figures and
code blocks. markdown.py and html.py render the same sections, so the two never disagree."""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.evidence.run import RunSet
from ncclprobe.recommend import Recommendation
from ncclprobe.recommend.emit import env_snippet
from ncclprobe.recommend.load import Measurements
from ncclprobe.records import short_label
from ncclprobe.report.plots import Figure
from ncclprobe.secrets import display_value
from ncclprobe.sizes import format_size


def cell_text(value) -> str:
    """A table cell as both renderers write it: floats to 4 significant digits (a mean over ranks is
    3.556, not 3.5555555555555554), nothing as `-`."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass
class Section:
    heading: str
    blocks: list[tuple[str, object]] = field(
        default_factory=list
    )  # ("text"|"table"|"figure"|"code", value)

    def text(self, value: str) -> Section:
        self.blocks.append(("text", value))
        return self

    def table(self, rows: list[dict]) -> Section:
        if rows:
            self.blocks.append(("table", rows))
        return self

    def figure(self, fig: Figure) -> Section:
        self.blocks.append(("figure", fig))
        return self

    def code(self, value: str) -> Section:
        self.blocks.append(("code", value))
        return self


def collective_sections(
    ev: Measurements,
    rec: Recommendation | None,
    rec_problem: str | None,
    figures: dict[str, list[Figure]],
    *,
    several: bool = False,
) -> list[Section]:
    """Recommendation, measurements and exclusions of one collective (headings name it when several)."""
    out = [_recommendation(rec, rec_problem), _measurements(ev, figures), _exclusions(ev)]
    if several:
        for section in out:
            section.heading = f"{ev.collective}: {section.heading}"
    return out


def run_sections(
    ev: Measurements, engine: RunSet | None, figures: dict[str, list[Figure]]
) -> list[Section]:
    """What every collective shares: the engine run (trace, profiles or server log) and the runs' environment."""
    return ([_engine(engine, figures)] if engine is not None else []) + [_environment(ev, engine)]


def _recommendation(rec: Recommendation | None, problem: str | None) -> Section:
    section = Section("Recommendation")
    if rec is None:
        return section.text(f"No recommendation: {problem}")
    if rec.change:
        section.text(
            f"Set {', '.join(f'`{k}={v}`' for k, v in rec.env.items())}: "
            f"{100 * rec.overall.gain:.1f}% less {rec.measurements.collective} time for {rec.workload.source}, "
            f"against {rec.against}."
        )
    else:
        section.text(
            f"No change: no configuration beat {rec.against} beyond the noise for {rec.workload.source}."
        )
    section.text(
        f"A gain counts only when the candidate's p90 is below the default's p10 and it is at least "
        f"{100 * rec.min_gain:.0f}%."
    )
    section.table(
        [
            {
                "size": format_size(c.size_bytes),
                "baseline (µs)": round(c.default_time_us, 2),
                "fastest": short_label(rec.settings_of(c.fastest)),
                "time (µs)": round(c.time_us, 2),
                "gain (%)": round(100 * c.gain, 1),
                "noise (±%)": round(100 * c.noise, 1),
                "verdict": c.verdict,
            }
            for c in rec.per_size
        ]
    )
    section.table(
        [
            {
                "configuration": short_label(rec.settings_of(cid)),
                "workload total (µs)": round(t[0], 2),
                "p10": round(t[1], 2),
                "p90": round(t[2], 2),
            }
            for cid, t in sorted(rec.overall.totals_us.items(), key=lambda kv: kv[1][0])
        ]
    )
    for note in rec.notes:
        section.text(f"Note: {note}")
    return section.code(env_snippet(rec))


def _measurements(ev: Measurements, figures: dict[str, list[Figure]]) -> Section:
    section = Section(
        f"Measurements: {ev.collective}, {ev.mode}, {ev.nranks} rank{'s' if ev.nranks != 1 else ''}"
    )
    for name in ("latency", "busbw", "speedup", "eager_vs_graph"):
        for fig in figures.get(name, []):
            section.figure(fig)
    if not figures.get("eager_vs_graph"):
        section.text("Eager against CUDA graph: not drawn, the results do not hold both modes.")
    return section


def _exclusions(ev: Measurements) -> Section:
    section = Section("Excluded configurations")
    if not ev.excluded:
        return section.text("None: every configuration gave correct results and finished.")
    return section.table(
        [
            {"configuration": short_label(e.settings), "status": e.status, "reason": e.reason}
            for e in ev.excluded
        ]
    )


def _engine(engine: RunSet, figures: dict[str, list[Figure]]) -> Section:
    section = Section("Engine")
    cfg = engine.config
    section.text(
        f"{engine.kind}: "
        + ", ".join(
            f"{k} {cfg[k]}"
            for k in ("engine", "preset", "tp", "batch", "k", "graphs", "device", "backend")
            if cfg.get(k) is not None
        )
    )
    section.table(
        [
            {
                "run": f"{r.mode or 'run'} / {r.label}",
                "tokens/s": _round(r.tokens_per_s, 1),
                "ms/token": _round(r.ms_per_token, 3),
                "settings": " ".join(f"{k}={v}" for k, v in r.settings.items()) or "default",
                "tokens per cycle (incl. bonus)": _round(r.acceptance.mean_length, 3)
                if r.acceptance
                else None,
            }
            for r in engine.runs
        ]
    )
    if engine.kind == "profile":
        section.table(
            [
                {
                    "run": r.label,
                    "phase": p.name,
                    "steps": p.count,
                    "ms/step": _round(p.median_ms, 3),
                    "GPU busy (ms)": _round(p.device_ms, 3),
                    "GPU idle (ms)": _round(p.idle_ms, 3),
                    "graph share": _round(p.graph_share, 2),
                }
                for r in engine.runs
                for p in r.phases.values()
            ]
        )
    for note in engine.notes:
        section.text(f"Note: {note}")
    for name in ("phases", "acceptance"):
        for fig in figures.get(name, []):
            section.figure(fig)
    return section


def _environment(ev: Measurements, engine: RunSet | None) -> Section:
    section = Section("Environment and versions")
    rows = []
    for path, header in zip(ev.paths, ev.headers):
        versions = header.get("versions") or {}
        rows.append(
            {
                "file": path,
                "kind": header.get("kind"),
                "host": header.get("hostname"),
                "started": header.get("started_at"),
                "backend": header.get("backend"),
                "ranks": header.get("nranks"),
                "gpus": ", ".join(_gpu_name(g) for g in header.get("gpus") or []) or "-",
                "nvlink": (header.get("topology") or {}).get("nvlink"),
                **{k: versions.get(k) for k in ("ncclprobe", "torch", "nccl", "cuda", "driver")},
            }
        )
    section.table(rows)
    env = {k: v for h in ev.headers for k, v in (h.get("env") or {}).items()}
    # the report is a file people pass around: the same masking as env-check, in case a header holds a secret
    section.table(
        [{"variable": k, "value": display_value(k, str(v))} for k, v in sorted(env.items())]
    )
    for trace in engine.traces if engine is not None else []:
        section.table(
            [
                {"trace": k, "value": v}
                for k, v in ((trace.get("provenance") or {}).get("versions") or {}).items()
            ]
        )
    return section


def _round(value, digits: int):
    return round(value, digits) if isinstance(value, (int, float)) else value


def _gpu_name(gpu) -> str:
    """A sweep header lists names; an imported run lists {rank, name, host, device}."""
    if isinstance(gpu, str):
        return gpu
    return str(gpu.get("name") or "?") if isinstance(gpu, dict) else "?"
