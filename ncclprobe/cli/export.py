"""`ncclprobe export`: results files -> nccl-tests-style text tables, or the CSV NCCL's tuner optimizer reads."""

from __future__ import annotations

import logging

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import force_option
from ncclprobe.errors import UsageProblem
from ncclprobe.records import read_results
from ncclprobe.safe_output import check_output, write_text

log = logging.getLogger("ncclprobe.export")

EPILOG = f"""--to nccl-tests: one table per collective, configuration, mode, op and dtype, in nccl-tests'
current text format (paste it into an issue; `ncclprobe import` reads it back, settings and all).

--to perf-csv: the input of NCCL's plugins/tuner/example/scripts/optimize_config.py
(collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,
bandwidth_gbps,latency_us), out of place, one mode (--mode); results that cannot be attributed to
one algorithm and protocol, and configurations recommend refuses, are left out (said on stderr).

\b
Examples:
  ncclprobe export sweep.jsonl --to nccl-tests > sweep.txt
  ncclprobe export sweep.jsonl imported.jsonl --to perf-csv --output perf.csv
  python optimize_config.py perf.csv -o nccl_tuner.conf   # from NCCL's plugins/tuner/example

{exit_codes("exported", "nothing to export: every result was left out (each reason on stderr)")}
"""


@click.command(
    epilog=EPILOG, short_help="Export results as nccl-tests tables or an optimize_config.py CSV."
)
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--to",
    "kind",
    type=click.Choice(["nccl-tests", "perf-csv"]),
    default="nccl-tests",
    show_default=True,
)
@click.option(
    "--mode",
    type=click.Choice(["eager", "graph"]),
    default="eager",
    show_default=True,
    help="perf-csv: the measurements to export (the CSV has no mode column).",
)
@click.option(
    "--allow-ll128-without-nvlink",
    "allow_ll128",
    is_flag=True,
    help="perf-csv: keep verified LL128 results on a node without NVLink.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    help="Write to this file instead of stdout (an existing file only with --force; never an input).",
)
@force_option
def command(results, kind, mode, allow_ll128, output, force):
    """Write results (from `sweep` or `import`) in another tool's format."""
    from ncclprobe import export

    if output:
        check_output(output, force=force, what="--output", inputs=results)
    files = [read_results(p) for p in results]
    if not any(f.results for f in files):
        raise UsageProblem("the results files hold no result records to export")
    done = (
        export.nccl_tests_text(files)
        if kind == "nccl-tests"
        else export.perf_csv(files, mode=mode, allow_ll128=allow_ll128)
    )
    for line in done.left_out:
        log.warning("left out: %s", line)
    if not done.rows:  # a CSV header alone is no export: say so, write nothing
        log.error("nothing to export: every result was left out (the reasons above)")
        return done.verdict()
    if output:
        write_text(output, done.text, force=force, what="--output")  # whole, or not at all
    else:
        click.echo(done.text, nl=False)
    return done.verdict()
