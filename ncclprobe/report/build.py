"""`build_report`: results (and an engine run: trace, profiles or server log) -> figures, report.md, report.html and the
recommendation JSON, all in one directory. A report is still written when no recommendation can
be made (no default or baseline configuration measured): it says why instead.

Every collective the results measured (or those asked for) gets its own recommendation,
measurements and exclusions; with several, figures go under figures/<collective>/ and the
recommendation JSON is the combined one (recommend/collectives.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run import RunSet, load_any
from ncclprobe.recommend import Recommendation, build_recommendation
from ncclprobe.recommend.collectives import collectives_in, combine
from ncclprobe.recommend.load import Measurements, load_measurements
from ncclprobe.recommend.workload import Workload, from_runs
from ncclprobe.report import html, markdown, plots
from ncclprobe.report.content import collective_sections, run_sections
from ncclprobe.safe_output import atomic_directory, check_output_dir, dumps_json

log = logging.getLogger("ncclprobe.report")


@dataclass
class ReportFiles:
    out_dir: Path
    markdown: Path
    html: Path
    recommendation: Path | None
    figures: list[plots.Figure] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "kind": "report",
            "out_dir": str(self.out_dir),
            "markdown": str(self.markdown),
            "html": str(self.html),
            "recommendation": str(self.recommendation) if self.recommendation else None,
            "figures": [
                {"name": f.name, "title": f.title, "png": str(f.png), "svg": str(f.svg)}
                for f in self.figures
            ],
        }


REPORT_ENTRIES = ("report.md", "report.html", "recommendation.json", "figures")


def build_report(
    results: list[str | Path],
    out_dir: str | Path,
    *,
    trace_path: str | Path | list[str | Path] | None = None,
    workload: Workload | None = None,
    collective: str | list[str] | None = None,
    mode: str | None = None,
    min_gain: float = 0.05,
    allow_ll128: bool = False,
    baseline: dict[str, str] | None = None,
    force: bool = False,
) -> ReportFiles:
    """Every input is read and every recommendation made before anything is written; the directory
    is then built beside `out_dir` and swapped in whole (`ncclprobe.safe_output.atomic_directory`),
    so an existing report is replaced only with `force` and never mixed with this one's files."""
    out = check_output_dir(out_dir, force=force, what="--output", owned=REPORT_ENTRIES)
    paths = [trace_path] if isinstance(trace_path, (str, Path)) else list(trace_path or [])
    engine = load_any(paths) if paths else None
    names = (
        [collective] if isinstance(collective, str) else list(collective or collectives_in(results))
    )
    reported = []  # (name, evidence, recommendation, why none)
    for name in names:
        try:
            ev = load_measurements(results, collective=name, mode=mode)
        except UsageProblem as exc:
            if len(names) == 1:
                raise
            log.warning("%s: not reported (%s)", name, exc)
            continue
        load = workload or (_engine_workload(engine, name) if engine is not None else None)
        reported.append(
            (name, ev, *_recommend(results, load, name, ev.mode, min_gain, allow_ll128, baseline))
        )
    if not reported:
        raise UsageProblem(
            f"nothing to report in {', '.join(map(str, results))} for {', '.join(names)}"
        )
    recs = [rec for _, _, rec, _ in reported if rec]
    with atomic_directory(out, force=force, what="--output", owned=REPORT_ENTRIES) as work:
        content, figures = [], []
        for name, ev, rec, problem in reported:
            fig_dir = work / "figures" if len(names) == 1 else work / "figures" / name
            figs = _figures(ev, results, name, fig_dir, frozenset(rec.refused if rec else ()))
            content += collective_sections(ev, rec, problem, figs, several=len(names) > 1)
            figures += [f for group in figs.values() for f in group]
        runs = engine.runs if engine else []
        engine_figs = {
            "phases": plots.phase_breakdown(runs, work / "figures", _engine_caveat(engine)),
            "acceptance": plots.acceptance(runs, work / "figures"),
        }
        content += run_sections(reported[0][1], engine, engine_figs)
        figures += [f for group in engine_figs.values() for f in group]
        title = f"ncclprobe report: {', '.join(names)}"
        (work / "report.md").write_text(markdown.render(title, content, work), encoding="utf-8")
        (work / "report.html").write_text(html.render(title, content), encoding="utf-8")
        if recs:
            (work / "recommendation.json").write_text(
                dumps_json(combine(recs, {}, min_gain).to_json(), indent=2) + "\n", encoding="utf-8"
            )
    moved = [
        plots.Figure(f.name, f.title, out / f.png.relative_to(work), out / f.svg.relative_to(work))
        for f in figures
    ]
    return ReportFiles(
        out_dir=out,
        markdown=out / "report.md",
        html=out / "report.html",
        recommendation=out / "recommendation.json" if recs else None,
        figures=moved,
    )


def _engine_caveat(engine: RunSet | None) -> str | None:
    """What the engine figure must say with it: on gloo, tuned against untuned is run-to-run noise."""
    if engine is None or engine.config.get("backend") != "gloo":
        return None
    if any(str(r.label).startswith("tuned") for r in engine.runs):
        return "gloo does not use NCCL settings: tuned against untuned differs by run-to-run noise"
    return None


def _recommend(
    results, workload, collective, mode, min_gain, allow_ll128, baseline=None
) -> tuple[Recommendation | None, str | None]:
    try:
        return build_recommendation(
            results,
            workload=workload,
            collective=collective,
            mode=mode,
            min_gain=min_gain,
            allow_ll128=allow_ll128,
            baseline=baseline,
        ), None
    except UsageProblem as exc:
        log.warning("no recommendation: %s", exc)
        return None, str(exc)


def _engine_workload(engine: RunSet, collective: str) -> Workload | None:
    try:
        return from_runs(
            engine.runs, collective=collective, source=f"{engine.kind} {_names(engine)}"
        )
    except (
        UsageProblem
    ) as exc:  # a trace without collectives (a 1-rank run) still has phases to draw
        log.warning("%s; weighting every measured size equally", exc)
        return None


def _names(engine: RunSet) -> str:
    value = next(iter(engine.inputs.values()), "")
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _figures(
    ev: Measurements, results, collective: str, fig_dir: Path, refused: frozenset[str]
) -> dict[str, list[plots.Figure]]:
    eager, graph = (_mode_measurements(results, collective, m) for m in ("eager", "graph"))
    return {
        "latency": plots.latency(ev, fig_dir),
        "busbw": plots.busbw(ev, fig_dir),
        "speedup": plots.speedup_heatmap(ev, fig_dir, refused),
        "eager_vs_graph": plots.eager_vs_graph(eager, graph, fig_dir),
    }


def _mode_measurements(results, collective: str, mode: str) -> Measurements | None:
    try:
        ev = load_measurements(results, collective=collective, mode=mode)
    except UsageProblem:
        return None
    return ev if ev.curves else None
