"""`ncclprobe recommend`: measured results -> the settings to apply, how sure, how much they buy."""

from __future__ import annotations

import logging

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.options import baseline_option, measurement_mode_option
from ncclprobe.cli.output import AliasedOption, emit, force_option, format_option
from ncclprobe.errors import UsageProblem
from ncclprobe.recommend import Recommendation
from ncclprobe.recommend.collectives import RecommendationSet, build_recommendations, collectives_in
from ncclprobe.recommend.emit import EMIT_KINDS, launch_notes, render
from ncclprobe.recommend.workload import from_files, from_sizes
from ncclprobe.records import short_label
from ncclprobe.safe_output import check_output, write_text
from ncclprobe.sizes import format_size

log = logging.getLogger("ncclprobe.recommend")

EPILOG = f"""\b
Every collective in the results is recommended on its own (or those named by --collective);
the exported environment is the one setting that serves them all together, and where their own
best settings differ the tuner CSV (one row per collective and size range) is the better vehicle.
Without an all-default run (imported nccl-tests runs often lack one) name the settings the job
runs with today (--baseline NCCL_ALGO=Ring,...; `default` for none), or the candidates are
compared with each other and the output says so. LL128 without NVLink stays refused.

\b
Examples:
  ncclprobe recommend sweep.jsonl
  ncclprobe recommend runs-1.jsonl runs-2.jsonl runs-3.jsonl --baseline NCCL_ALGO=Ring
  ncclprobe recommend sweep.jsonl --trace trace.json --emit env --output nccl.env
  ncclprobe recommend sweep.jsonl --trace rank0.trace.json.gz --trace rank1.trace.json.gz
  ncclprobe recommend sweep.jsonl imported.jsonl --sizes 14K,56K,1M --emit json --output rec.json
  ncclprobe recommend sweep.jsonl --emit tuner-csv --output nccl_tuner.conf

{exit_codes("recommended (a change or none)", "a configuration was excluded for wrong results, a hang or an error")}
"""


@click.command(epilog=EPILOG, short_help="Recommend NCCL settings from sweep results.")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--trace",
    "--workload",
    "traces",
    multiple=True,
    type=click.Path(dir_okay=False),
    cls=AliasedOption,
    hidden_aliases=("--workload",),
    help="The job whose collective sizes weigh the global choice: an engine trace, PyTorch profiler "
    "traces (one per rank; repeatable) or a server log.",
)
@click.option(
    "--sizes", help="Workload sizes instead of a trace, e.g. 14K,56K,1M (each counted once)."
)
@click.option(
    "--collective", help="Collectives to tune, comma separated [every collective in the results]."
)
@baseline_option
@measurement_mode_option
@click.option(
    "--min-gain-pct",
    type=click.FloatRange(0, 100),
    default=5.0,
    show_default=True,
    help="Smallest gain worth a change, on top of clearing the trial spread.",
)
@click.option(
    "--allow-ll128-without-nvlink",
    "allow_ll128",
    is_flag=True,
    help="Consider LL128 without NVLink (only if the sweep verified its results).",
)
@click.option(
    "--emit",
    "emit_kind",
    type=click.Choice(EMIT_KINDS),
    help="Write shell exports, a tuner-plugin CSV or the recommendation JSON.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    help="File for --emit (default: stdout); never one of "
    "the inputs, and an existing file only with --force.",
)
@force_option
@format_option
def command(
    results,
    traces,
    sizes,
    collective,
    baseline,
    mode,
    min_gain_pct,
    allow_ll128,
    emit_kind,
    output,
    force,
    fmt,
):
    """Recommend NCCL settings from sweep and imported nccl-tests results.

    Configurations with wrong results, hangs or errors are excluded and listed. Per size, the
    fastest safe configuration and its gain over the default; then one global setting that
    minimises the workload-weighted total time. A gain inside the run-to-run noise is not
    recommended. Exits 1 when a configuration was excluded for wrong results, a hang or an error.
    """
    if traces and sizes:
        raise UsageProblem("give either --trace FILE or --sizes, not both")
    if sizes is not None and not sizes.strip():
        raise UsageProblem("--sizes is empty; give sizes like 14K,1M")
    if output and not emit_kind:
        raise UsageProblem("--output names the file for --emit; add --emit env, tuner-csv or json")
    if output:
        check_output(output, force=force, what="--output", inputs=[*results, *traces])
    from ncclprobe.evidence.labels import parse_labels

    names = (
        [n.strip() for n in collective.split(",") if n.strip()]
        if collective
        else collectives_in(list(results))
    )
    workloads = {name: _workload(traces, sizes, name, len(names)) for name in names}
    recs = build_recommendations(
        list(results),
        collectives=names,
        workloads=workloads,
        mode=mode,
        min_gain=min_gain_pct / 100,
        allow_ll128=allow_ll128,
        baseline=parse_labels(baseline, "--baseline") if baseline is not None else None,
    )
    if emit_kind and not output:
        click.echo(render(emit_kind, recs), nl=False)
    else:
        if emit_kind:
            write_text(output, render(emit_kind, recs), force=force, what="--output")
            log.info("wrote %s (%s)", output, emit_kind)
        _show(fmt, recs)
    return recs.verdict()


def _workload(traces, sizes, name: str, count: int):
    if sizes is not None:
        return from_sizes(sizes)
    if not traces:
        return None
    try:
        return from_files(list(traces), collective=name)
    except UsageProblem:
        if count == 1:
            raise
        log.warning(
            "%s issues no %s: every measured size weighs the same for it", ", ".join(traces), name
        )
        return None


def _show(fmt: str, recs: RecommendationSet) -> None:
    if fmt != "table":
        emit(fmt, recs.to_json(), [row for rec in recs.recs for row in table_rows(rec)])
        return
    for rec in recs.recs:
        emit(fmt, recs.to_json(), table_rows(rec), title=headline(rec), notes=explanation(rec))
    if len(recs.recs) > 1 or recs.problems:
        settings = " ".join(f"{k}={v}" for k, v in recs.env.items())
        title = (
            f"all collectives: {'export ' + settings if recs.change else 'no global change'}"
            + (f" ({100 * recs.gain:.1f}% less time summed over them)" if recs.change else "")
        )
        emit(fmt, recs.to_json(), [], title=title, notes=recs.conflicts + recs.notes)


def headline(rec: Recommendation) -> str:
    if not rec.change:
        m = rec.measurements
        return f"recommendation: no change ({m.collective}, {m.mode}, {rec.workload.source})"
    return (
        f"recommendation: {' '.join(f'{k}={v}' for k, v in rec.env.items())} "
        f"({100 * rec.overall.gain:.1f}% less {rec.measurements.collective} time for {rec.workload.source})"
    )


def explanation(rec: Recommendation) -> list[str]:
    lines = [
        f"per size: fastest safe configuration vs {rec.against}; a gain counts only beyond the p10-p90 "
        f"trial spread and at least {100 * rec.min_gain:.0f}%"
    ]
    for r in rec.ranges:
        if r.config_id not in ("default", rec.baseline_id, "none"):
            lines.append(
                f"{format_size(r.min_size_bytes)}..{format_size(r.max_size_bytes)}: "
                f"{short_label(rec.settings_of(r.config_id))} saves "
                f"{100 * r.gain_min:.0f}-{100 * r.gain_max:.0f}% (tuner CSV can apply it per size)"
            )
    lines += [f"excluded {e.config_id}: {e.reason}" for e in rec.measurements.excluded]
    return lines + rec.measurements.notes + rec.notes + (launch_notes(rec) if rec.change else [])


def table_rows(rec: Recommendation) -> list[dict]:
    return [
        {
            "size": format_size(c.size_bytes),
            "baseline_us": round(c.default_time_us, 3),
            "fastest": short_label(rec.settings_of(c.fastest)),
            "time_us": round(c.time_us, 3),
            "gain_pct": round(100 * c.gain, 2),
            "noise_pct": round(100 * c.noise, 2),
            "verdict": c.verdict,
        }
        for c in rec.per_size
    ]
