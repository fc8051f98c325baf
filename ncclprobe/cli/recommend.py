"""`ncclprobe recommend`: measured results -> the settings to apply, how sure, how much they buy."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from ncclprobe.cli.output import emit, format_option
from ncclprobe.errors import UsageProblem
from ncclprobe.recommend import Recommendation, build_recommendation
from ncclprobe.recommend.emit import EMIT_KINDS, launch_notes, render
from ncclprobe.recommend.workload import from_files, from_sizes
from ncclprobe.records import short_label
from ncclprobe.sizes import format_size

log = logging.getLogger("ncclprobe.recommend")

EPILOG = """\b
Examples:
  ncclprobe recommend sweep.jsonl
  ncclprobe recommend sweep.jsonl --workload trace.json --emit env --output nccl.env
  ncclprobe recommend sweep.jsonl --trace rank0.trace.json.gz --trace rank1.trace.json.gz
  ncclprobe recommend sweep.jsonl imported.jsonl --sizes 14K,56K,1M --emit json --output rec.json
  ncclprobe recommend sweep.jsonl --emit tuner-csv --output nccl_tuner.conf
"""


@click.command(epilog=EPILOG, short_help="Recommend NCCL settings from sweep results.")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--workload", "--trace", "traces", multiple=True, type=click.Path(dir_okay=False),
              help="The job whose collective sizes weigh the global choice: an engine trace, PyTorch profiler "
                   "traces (one per rank; repeatable) or a server log.")
@click.option("--sizes", help="Workload sizes instead of a trace, e.g. 14K,56K,1M (each counted once).")
@click.option("--collective", default="all_reduce", show_default=True, help="Collective to tune.")
@click.option("--mode", type=click.Choice(["eager", "graph"]), help="Measurements to use [eager if measured].")
@click.option("--min-gain-pct", type=click.FloatRange(0, 100), default=5.0, show_default=True,
              help="Smallest gain worth a change, on top of clearing the trial spread.")
@click.option("--allow-ll128-without-nvlink", "allow_ll128", is_flag=True,
              help="Consider LL128 without NVLink (only if the sweep verified its results).")
@click.option("--emit", "emit_kind", type=click.Choice(EMIT_KINDS),
              help="Write shell exports, a tuner-plugin CSV or the recommendation JSON.")
@click.option("--output", type=click.Path(dir_okay=False), help="File for --emit (default: stdout).")
@format_option
def command(results, traces, sizes, collective, mode, min_gain_pct, allow_ll128, emit_kind, output, fmt):
    """Recommend NCCL settings from sweep and imported nccl-tests results.

    Configurations with wrong results, hangs or errors are excluded and listed. Per size, the
    fastest safe configuration and its gain over the default; then one global setting that
    minimises the workload-weighted total time. A gain inside the run-to-run noise is not
    recommended. Exits 1 when a configuration was excluded for wrong results, a hang or an error.
    """
    if traces and sizes:
        raise UsageProblem("give either --workload TRACE or --sizes, not both")
    if sizes is not None and not sizes.strip():
        raise UsageProblem("--sizes is empty; give sizes like 14K,1M")
    if output and not emit_kind:
        raise UsageProblem("--output names the file for --emit; add --emit env, tuner-csv or json")
    workload = from_files(list(traces), collective=collective) if traces else None
    workload = from_sizes(sizes) if sizes is not None else workload
    rec = build_recommendation(list(results), workload=workload, collective=collective, mode=mode,
                               min_gain=min_gain_pct / 100, allow_ll128=allow_ll128)
    if emit_kind and not output:
        click.echo(render(emit_kind, rec), nl=False)
    else:
        if emit_kind:
            _write(Path(output), render(emit_kind, rec))
            log.info("wrote %s (%s)", output, emit_kind)
        emit(fmt, rec.to_json(), table_rows(rec), title=headline(rec), notes=explanation(rec))
    return 1 if any(e.status in ("wrong", "hang", "error") for e in rec.evidence.excluded) else 0


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"--output {str(path)!r}: cannot write it ({exc.strerror or exc})") from None


def headline(rec: Recommendation) -> str:
    if not rec.env:
        return f"recommendation: no change ({rec.evidence.collective}, {rec.evidence.mode}, {rec.workload.source})"
    return (f"recommendation: {' '.join(f'{k}={v}' for k, v in rec.env.items())} "
            f"({100 * rec.overall.gain:.1f}% less {rec.evidence.collective} time for {rec.workload.source})")


def explanation(rec: Recommendation) -> list[str]:
    lines = [f"per size: fastest safe configuration vs default; a gain counts only beyond the p10-p90 "
             f"trial spread and at least {100 * rec.min_gain:.0f}%"]
    for r in rec.ranges:
        if r.config_id != "default":
            lines.append(f"{format_size(r.min_size_bytes)}..{format_size(r.max_size_bytes)}: "
                         f"{short_label(rec.settings_of(r.config_id))} saves "
                         f"{100 * r.gain_min:.0f}-{100 * r.gain_max:.0f}% (tuner CSV can apply it per size)")
    lines += [f"excluded {e.config_id}: {e.reason}" for e in rec.evidence.excluded]
    return lines + rec.notes + (launch_notes(rec) if rec.env else [])


def table_rows(rec: Recommendation) -> list[dict]:
    return [{"size": format_size(c.size_bytes), "default_us": round(c.default_time_us, 3),
             "fastest": short_label(rec.settings_of(c.fastest)), "time_us": round(c.time_us, 3),
             "gain_pct": round(100 * c.gain, 2), "noise_pct": round(100 * c.noise, 2),
             "verdict": "change" if c.significant else ("keep default" if c.fastest != "default" else "default fastest")}
            for c in rec.per_size]
