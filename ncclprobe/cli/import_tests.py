"""`ncclprobe import`: a file other tools wrote -> the result records recommend and report read."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit_report, force_option, format_option
from ncclprobe.evidence.labels import parse_labels
from ncclprobe.evidence.text import read_text_file
from ncclprobe.importing import ImportOptions, import_text, write_records
from ncclprobe.records_writer import ResultWriter
from ncclprobe.safe_output import check_output

log = logging.getLogger("ncclprobe.import")

EPILOG = f"""Reads: p2pBandwidthLatencyTest and nvbandwidth output (text or -j JSON) into P2P matrix records with
findings and advice (a p2pBandwidthLatencyTest paste of its peer access lines only, or cut inside a
matrix, is read as far as it goes and says so); `vllm collect-env` / `python -m sglang.check_env`
text; nccl-tests text output (any generation; mpirun tags, prompts and NCCL INFO lines are skipped;
a file of several runs is split into runs, each with its own header; the interleaved output of a
non-MPI binary launched N times is refused with the reason; a run that stopped before its first
result row is read as one that measured nothing, with its failure named; rows without their header
are read in the layout they fit; a launcher's failure lines alone are a launch that measured
nothing) and nccl-tests -J JSON of 2.17.3 to 2.19.6 (its `env` gives the run's NCCL settings; only
NCCL/CUDA/torch variables are kept, masked).

--settings K=V,... labels runs whose text does not record its environment: given once it labels
every run, given once per run it labels them in order (`default` for a run with no setting). A
label may add to what the file shows, never contradict it. With --output and several runs, run k
is written to NAME-k.EXT (all or nothing).

\b
Examples:
  ncclprobe import all_reduce_perf.out
  ncclprobe import all_reduce_perf.out --output imported.jsonl
  ncclprobe import nt.json --output imported.jsonl             # all_reduce_perf ... -J nt.json
  ncclprobe import runs.txt --settings default --settings NCCL_ALGO=Tree --output runs.jsonl
  ncclprobe import mpirun.log --collective all_reduce --format json

{exit_codes("imported", "nccl-tests counted wrong values, or the P2P matrices show an error")}
"""


@click.command(
    epilog=EPILOG,
    short_help="Read nccl-tests (text, -J), nvbandwidth, p2pBandwidthLatencyTest or collect-env output.",
)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    help="Write a results file (JSONL) for recommend/report.",
)
@click.option(
    "--collective", help="Name the collective when the output does not (e.g. all_reduce, sendrecv)."
)
@click.option(
    "--settings",
    "labels",
    multiple=True,
    metavar="K=V,...",
    help="NCCL settings of the run(s) (repeatable: once per run).",
)
@force_option
@format_option
def command(file, output, collective, labels, force, fmt):
    """Read what nccl-tests printed or wrote with -J and print its rows, or write them with
    --output as result records (one per size and in/out-of-place) that `ncclprobe recommend`,
    `report` and `export` read. nvbandwidth (text or -j) and p2pBandwidthLatencyTest output become
    P2P matrices with their findings; `vllm collect-env` / `python -m sglang.check_env` output shows
    its NCCL settings, version and topology.

    Exits 1 when nccl-tests counted wrong values.
    """
    if (
        output
    ):  # the directory and the kind of target now; each output's own name once the runs are known
        check_output(output, force=True, what="--output", inputs=[file])
    options = ImportOptions(
        source=str(file),
        argv=list(sys.argv),
        collective=collective,
        labels=[parse_labels(text) for text in labels],
    )
    report = import_text(read_text_file(file, "input"), options)
    if output and report.data.get("own_format"):
        log.info("wrote %d records to %s", write_records(report, output, force), output)
        output = None
    record_sets = report.data.get("record_sets", [])
    paths = output_paths(output, len(record_sets)) if output else []
    for path in paths:  # every name is checked before anything is written
        check_output(path, force=force, what="--output", inputs=[file])
    _write_all(paths, record_sets, force)
    emit_report(report, fmt)
    return report.verdict()


def output_paths(output: str, count: int) -> list[Path]:
    path = Path(output)
    if count == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{k}{path.suffix}") for k in range(1, count + 1)]


def _write_all(paths: list[Path], record_sets: list[list[dict]], force: bool) -> None:
    """Every results file whole (`ResultWriter(atomic=True)`), and all or none: a failure removes
    the files this call created before it."""
    created = []
    try:
        for path, records in zip(paths, record_sets):
            existed = path.exists()
            _write(path, records, force)
            if not existed:
                created.append(path)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise


def _write(path: Path, records: list[dict], force: bool) -> None:
    header, *rest = records
    header = {k: v for k, v in header.items() if k not in ("record", "schema_version")}
    with ResultWriter(path, header, atomic=True, force=force) as writer:  # whole, or not at all
        for record in rest:
            writer.write(record)
    log.info("wrote %d result records to %s", len(rest) - 1, path)
