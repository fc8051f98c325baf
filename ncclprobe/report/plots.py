"""The report's figures, each saved as PNG and SVG with matplotlib's Agg backend.

Readability rules every figure follows: labelled axes with units, sizes on a log2 axis labelled
K/M/G, legends placed outside the data area, one colour per configuration across figures. A figure
carries the caveat its text carries (gloo timings are noise; `--share-gpu` times are not link
times: `recommend.safety.timing_caveat`) as a caption under it, so a picture passed on alone says it.
Every function returns the Figure records it wrote, or [] when its data is absent.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

from ncclprobe.evidence.run.modes import Mode  # noqa: E402
from ncclprobe.recommend.load import Curve, Measurements  # noqa: E402
from ncclprobe.recommend.safety import timing_caveat  # noqa: E402
from ncclprobe.records import Status, short_label  # noqa: E402
from ncclprobe.sizes import format_size  # noqa: E402

PHASE_ORDER = ("decode", "draft", "verify", "accept", "draft_extend", "host")


@dataclass(frozen=True)
class Figure:
    name: str  # file stem, e.g. "latency"
    title: str
    png: Path
    svg: Path


def latency(ev: Measurements, out: Path) -> list[Figure]:
    """Median time against size per configuration, log-log, with the p10-p90 band."""
    if not ev.curves:
        return []
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colours = _colours(ev)
    for curve in _ordered(ev):
        sizes = list(curve.points)
        pts = [curve.points[s] for s in sizes]
        colour = colours[curve.config_id]
        ax.plot(
            sizes, [p.time_us for p in pts], marker="o", ms=3, color=colour, label=_label(curve)
        )
        ax.fill_between(
            sizes, [p.p10_us for p in pts], [p.p90_us for p in pts], color=colour, alpha=0.15
        )
    _time_axis(ax)
    _size_axis(ax, _all_sizes(ev))
    ax.set_ylabel("time per collective (µs, median; band p10-p90)")
    title = f"{ev.collective} latency ({ev.mode}, {ev.nranks} rank{'s' if ev.nranks != 1 else ''})"
    return [_save(fig, ax, out, "latency", title, timing_caveat(ev.headers))]


def busbw(ev: Measurements, out: Path) -> list[Figure]:
    """Bus bandwidth (nccl-tests' busbw) against size per configuration."""
    curves = [c for c in ev.curves.values() if any(p.busbw_gbps for p in c.points.values())]
    if not curves:
        return []
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colours = _colours(ev)
    for curve in _ordered(ev):
        if curve in curves:
            measured = {
                s: p.busbw_gbps for s, p in curve.points.items() if p.busbw_gbps is not None
            }
            ax.plot(
                list(measured),
                list(measured.values()),
                marker="o",
                ms=3,
                color=colours[curve.config_id],
                label=_label(curve),
            )
    _size_axis(ax, _all_sizes(ev))
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    return [
        _save(
            fig,
            ax,
            out,
            "busbw",
            f"{ev.collective} bus bandwidth ({ev.mode})",
            timing_caveat(ev.headers),
        )
    ]


def speedup_heatmap(
    ev: Measurements, out: Path, refused: frozenset[str] = frozenset()
) -> list[Figure]:
    """Speedup over the default (default time / config time) per configuration and size, the
    value written in each cell; cells where a configuration gave wrong results, hung or failed
    are marked instead. Excluded and refused (unsafe) configurations say so in their row label.
    Only a difference beyond the noise is coloured (`stats.significant`, either way); the others
    are grey with their value written, and timings that cannot rank NCCL settings (gloo,
    --share-gpu) colour nothing and call no row refused: the caveat under the figure says why."""
    default = ev.default
    if default is None:
        return []
    sizes = sorted(default.points)
    rows = sorted((set(ev.curves) | {e.config_id for e in ev.excluded}) - {"default"})
    if not rows:
        return []
    caveat = timing_caveat(ev.headers)
    grid, marks, real = _speedup_grid(ev, default, rows, sizes)
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(sizes) + 3), max(2.5, 0.5 * len(rows) + 1.5)))
    values = [v for row in grid for v in row if v is not None]
    top = max([max(v, 1 / v) for v in values if v > 0] + [1.05])
    masked = [
        [
            v if v is not None and (r, c) in real and not caveat else float("nan")
            for c, v in enumerate(row)
        ]
        for r, row in enumerate(grid)
    ]
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#e6e6e6")  # noise: neutral grey
    # log scale symmetric about 1: 2x faster and 2x slower sit equally far from the neutral colour
    image = ax.imshow(masked, cmap=cmap, norm=LogNorm(1 / top, top), aspect="auto")
    refused = frozenset() if caveat else refused
    for r, row in enumerate(grid):
        for c, value in enumerate(row):
            text = marks.get((r, c)) or (f"{value:.2f}" if value is not None else "")
            dark = (
                (r, c) in real
                and not caveat
                and value is not None
                and value > 0
                and abs(math.log(value)) > 0.6 * math.log(top)
            )
            ax.text(
                c,
                r,
                text,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark else "black",
                fontweight="bold" if (r, c) in marks else None,
            )
    ax.set_xticks(range(len(sizes)), [format_size(s) for s in sizes], rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), [_row_label(ev, cid, refused) for cid in rows])
    ax.set_xlabel("message size (bytes, K/M/G = 2^10/2^20/2^30)")
    ax.set_title(
        f"speedup over default ({ev.collective}, {ev.mode}); grey = inside the noise; "
        "x = wrong, H = hang, E = error"
    )
    bar = fig.colorbar(image, ax=ax, label="speedup (default time / config time)")
    bar.set_ticks(_ratio_ticks(top))
    bar.set_ticks([], minor=True)
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    return [_write(fig, out, "speedup", "speedup over default", timing_caveat(ev.headers))]


def eager_vs_graph(
    eager: Measurements | None, graph: Measurements | None, out: Path
) -> list[Figure]:
    """Time per size of each configuration measured both eagerly and inside a CUDA graph."""
    if eager is None or graph is None:
        return []
    both = [c.config_id for c in _ordered(eager) if c.config_id in graph.curves]
    if not both:
        return []
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colours = _colours(eager)
    for cid in both:
        for ev, style in ((eager, "-"), (graph, "--")):
            pts = ev.curves[cid].points
            ax.plot(
                list(pts),
                [p.time_us for p in pts.values()],
                style,
                marker="o",
                ms=3,
                color=colours[cid],
                label=f"{_label(ev.curves[cid])} ({ev.mode})",
            )
    _time_axis(ax)
    _size_axis(
        ax, sorted({s for ev in (eager, graph) for c in ev.curves.values() for s in c.points})
    )
    ax.set_ylabel("time per collective (µs, median)")
    return [
        _save(
            fig,
            ax,
            out,
            "eager_vs_graph",
            f"{eager.collective}: eager (solid) vs CUDA graph (dashed)",
            timing_caveat(eager.headers + graph.headers),
        )
    ]


def phase_breakdown(runs: list, out: Path, caveat: str | None = None) -> list[Figure]:
    """Per engine run (baseline, speculative, tuned): milliseconds per generated token by phase;
    for profiles, which count steps rather than tokens, the median milliseconds per step. Every
    run is a bar of its own, even where two runs' names read alike."""
    runs = [r for r in runs if r.phases]
    if not runs:
        return []
    per_token = all(r.new_tokens for r in runs)
    phases = [p for p in PHASE_ORDER if any(p in r.phases for r in runs)]
    phases += sorted({p for r in runs for p in r.phases} - set(phases))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(runs) + 2), 4.5))
    # one word per line, so labels of merged traces ("untuned seed-graphs-decode") never overlap
    names = ["\n".join([r.mode or "run", *str(r.label).split()]) for r in runs]
    bottoms, places = [0.0] * len(runs), list(range(len(runs)))
    for i, phase in enumerate(phases):
        heights = [_phase_height(r, phase, per_token) for r in runs]
        ax.bar(places, heights, bottom=bottoms, color=_colour(i), label=phase)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(places, names, fontsize=8)
    ax.set_ylabel(
        "time per generated token (ms)"
        if per_token
        else "median time per step (ms), stacked by phase"
    )
    ax.set_xlabel("engine run (mode / settings)")
    title = "engine time per token by phase" if per_token else "engine step time by phase (profile)"
    return [_save(fig, ax, out, "phases", title, caveat)]


def _phase_height(run, phase: str, per_token: bool) -> float:
    rec = run.phases.get(phase)
    if rec is None:
        return 0.0
    return rec.total_ms / run.new_tokens if per_token else (rec.median_ms or 0.0)


def acceptance(runs: list, out: Path) -> list[Figure]:
    """How many draft tokens each speculative cycle accepted (0..k), per speculative run."""
    runs = [
        r
        for r in runs
        if r.mode == Mode.SPECULATIVE and r.acceptance and sum(r.acceptance.histogram) > 0
    ]
    if not runs:
        return []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        hist = run.acceptance.histogram
        total = sum(hist)
        xs = [k + (i - (len(runs) - 1) / 2) * width for k in range(len(hist))]
        mean = run.acceptance.mean_length
        label = f"{run.label}" + (
            f" ({mean:.2f} tokens/cycle incl. bonus)" if mean is not None else ""
        )
        ax.bar(xs, [100 * h / total for h in hist], width=width, color=_colour(i), label=label)
    ax.set_xticks(range(len(runs[0].acceptance.histogram)))
    ax.set_xlabel("draft tokens accepted per cycle (bonus token not counted)")
    ax.set_ylabel("cycles (%)")
    return [_save(fig, ax, out, "acceptance", "speculative acceptance")]


def _speedup_grid(ev: Measurements, default: Curve, rows: list[str], sizes: list[int]):
    """(speedups by row and size, marks of failed cells, the cells whose difference from the default
    is beyond the noise, faster or slower)."""
    from ncclprobe.stats import significant

    grid, marks, real = [], {}, set()
    symbols: dict[str, str] = {
        Status.WRONG: "x",
        Status.HANG: "H",
        Status.ERROR: "E",
        Status.IGNORED: "I",
        Status.SKIPPED: "-",
    }
    excluded = {e.config_id: e.status for e in ev.excluded}
    for r, cid in enumerate(rows):
        curve, row_marks = ev.curves.get(cid) or ev.excluded_curves.get(cid), ev.marks.get(cid, {})
        row = []
        for c, size in enumerate(sizes):
            point = curve.points.get(size) if curve else None
            status = row_marks.get(size) or (
                excluded.get(cid) if point is None and cid in excluded else None
            )
            if status:
                marks[(r, c)] = symbols.get(status, "?")
            base = default.points[size]
            row.append(base.time_us / point.time_us if point and not status else None)
            if point and not status and (significant(point, base) or significant(base, point)):
                real.add((r, c))
        grid.append(row)
    return grid, marks, real


def _row_label(ev: Measurements, cid: str, refused: frozenset[str]) -> str:
    curve = ev.curves.get(cid)
    settings = (
        curve.settings if curve else next(e.settings for e in ev.excluded if e.config_id == cid)
    )
    # refusals are not all about safety (gloo or --share-gpu timings rank nothing): the notes say why
    return short_label(settings) + (
        " (refused)" if cid in refused else "" if curve else " (excluded)"
    )


def _ratio_ticks(top: float) -> list[float]:
    """Powers of two inside [1/top, top] (0.25, 0.5, 1, 2, 4), and the ends when few fit."""
    ticks = [2.0**k for k in range(-12, 13) if 1 / top <= 2.0**k <= top]
    return ticks if len(ticks) >= 3 else sorted({round(1 / top, 2), 1.0, round(top, 2)})


def _label(curve: Curve) -> str:
    return short_label(curve.settings)


def _colours(ev: Measurements) -> dict[str, object]:
    """One colour per configuration for every figure: default black, the rest tab10 (tab20 past ten
    configurations, so none repeats) in id order."""
    others = sorted((set(ev.curves) | set(ev.excluded_curves)) - {"default"})
    palette = plt.get_cmap("tab10" if len(others) <= 10 else "tab20")
    return {"default": "black", **{cid: palette(i % palette.N) for i, cid in enumerate(others)}}


def _ordered(ev: Measurements) -> list[Curve]:
    """Default first, so it leads every legend."""
    return sorted(ev.curves.values(), key=lambda c: (c.config_id != "default", c.config_id))


def _colour(i: int):
    return plt.get_cmap("tab10")(i % 10)


def _all_sizes(ev: Measurements) -> list[int]:
    return sorted({s for c in ev.curves.values() for s in c.points})


def _size_axis(ax, sizes: list[int]) -> None:
    """Log2 x axis with ticks at the measured sizes (thinned to ~10), labelled 1K, 64K, 1M."""
    ax.set_xscale("log", base=2)
    step = max(1, len(sizes) // 10)
    ax.xaxis.set_major_locator(FixedLocator(sizes[::step]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: format_size(int(round(x)))))
    ax.set_xlabel("message size (bytes, K/M/G = 2^10/2^20/2^30)")
    ax.grid(True, which="major", alpha=0.3)


def _time_axis(ax) -> None:
    """Log y axis in microseconds with 1-2-5 ticks written plainly (5, 10, 20, 50), not 10^1;
    denser ticks when the data spans about a decade or less, where 1-2-5 would leave one or two."""
    ax.set_yscale("log")
    ax.autoscale_view()
    low, high = ax.get_ylim()
    subs = (1.0, 2.0, 5.0) if high > 12 * low else (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=30))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))


def _save(fig, ax, out: Path, name: str, title: str, caveat: str | None = None) -> Figure:
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=8)
    return _write(fig, out, name, title, caveat)


def _write(fig, out: Path, name: str, title: str, caveat: str | None = None) -> Figure:
    if caveat:  # under the axes, inside the saved area (bbox_inches="tight" keeps it)
        fig.text(
            0.01,
            -0.02,
            "\n".join(textwrap.wrap(f"Caveat: {caveat}", 110)),
            ha="left",
            va="top",
            fontsize=8,
            color="#a00000",
        )
    out.mkdir(parents=True, exist_ok=True)
    png, svg = out / f"{name}.png", out / f"{name}.svg"
    fig.savefig(png, dpi=120, bbox_inches="tight")
    fig.savefig(svg, bbox_inches="tight")
    plt.close(fig)
    return Figure(name=name, title=title, png=png, svg=svg)
