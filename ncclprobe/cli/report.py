"""`ncclprobe report`: results and an engine trace -> pictures and a Markdown/HTML report."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.options import baseline_option, measurement_mode_option
from ncclprobe.cli.output import emit, force_option, format_option, output_option
from ncclprobe.errors import UsageProblem, require_extra
from ncclprobe.recommend.workload import from_sizes

EPILOG = f"""\b
Examples:
  ncclprobe report sweep.jsonl --output report/
  ncclprobe report sweep.jsonl imported.jsonl --trace trace.json --output report/
  ncclprobe report sweep.jsonl --trace graphs-decode.json --trace graphs-all.json --output report/
  ncclprobe report sweep.jsonl --sizes 14K,1M --output report/ --format json
  ncclprobe report sweep.jsonl --trace rank0.trace.json.gz --trace rank1.trace.json.gz \\
      --output report/

{exit_codes("the report was written")}
"""


@click.command(epilog=EPILOG, short_help="Plots and a Markdown/HTML report from results.")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@output_option(
    "Directory to write (new or empty; an earlier report there only with --force, replaced whole).",
    dest="out_dir",
    directory=True,
    required=True,
    old=("--out",),
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    multiple=True,
    help="The engine run: an engine trace (repeatable: runs drawn side by side), PyTorch profiler traces "
    "(one per rank) or a server log; phases, acceptance, workload sizes.",
)
@click.option(
    "--sizes", help="Workload sizes for the recommendation, e.g. 14K,1M (default: the trace's)."
)
@click.option(
    "--collective",
    help="Collectives to report on, comma separated [every collective in the results].",
)
@baseline_option
@measurement_mode_option
@click.option(
    "--allow-ll128-without-nvlink",
    "allow_ll128",
    is_flag=True,
    help="Let the recommendation consider LL128 without NVLink (verified results only).",
)
@force_option
@format_option
def command(results, out_dir, trace, sizes, collective, baseline, mode, allow_ll128, force, fmt):
    """Write a self-contained report: latency, bus bandwidth, speedup heatmap (wrong and hung
    cells marked), eager against CUDA graph, the engine's phase breakdown and acceptance
    histogram (PNG and SVG), the recommendation, and the environment and versions of the runs.
    Lists the files written on stdout.
    """
    if sizes is not None and not sizes.strip():
        raise UsageProblem("--sizes is empty; give sizes like 14K,1M")
    require_extra("matplotlib", "report", "the report's figures")
    from ncclprobe.evidence.labels import parse_labels
    from ncclprobe.report import build_report

    names = [n.strip() for n in collective.split(",") if n.strip()] if collective else None
    files = build_report(
        list(results),
        out_dir,
        trace_path=list(trace) or None,
        workload=from_sizes(sizes) if sizes is not None else None,
        collective=names,
        mode=mode,
        allow_ll128=allow_ll128,
        baseline=parse_labels(baseline, "--baseline") if baseline is not None else None,
        force=force,
    )
    rows = [
        {"file": str(p), "what": what}
        for p, what in [
            (files.markdown, "Markdown report"),
            (files.html, "HTML report (self-contained)"),
        ]
        + ([(files.recommendation, "recommendation JSON")] if files.recommendation else [])
        + [(f.png, f.title) for f in files.figures]
        + [(f.svg, f.title + " (SVG)") for f in files.figures]
    ]
    emit(fmt, files.to_json(), rows, title=f"report written to {out_dir}")
