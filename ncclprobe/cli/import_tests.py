"""`ncclprobe import`: nccl-tests output -> the result records recommend and report read."""

from __future__ import annotations

import logging
import sys

import click

from ncclprobe.cli.output import emit, format_option
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl_tests import parse_nccl_tests, to_records
from ncclprobe.evidence.text import read_text_file
from ncclprobe.records import ResultWriter
from ncclprobe.sizes import format_size

log = logging.getLogger("ncclprobe.import")

EPILOG = """\b
Examples:
  ncclprobe import all_reduce_perf.out
  ncclprobe import all_reduce_perf.out --output imported.jsonl
  ncclprobe import mpirun.log --collective all_reduce --format json
"""


@click.command(epilog=EPILOG, short_help="Import nccl-tests output as result records.")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--output", type=click.Path(dir_okay=False), help="Write a results file (JSONL) for recommend/report.")
@click.option("--collective", help="Name the collective when the output does not (e.g. all_reduce, sendrecv).")
@format_option
def command(file, output, collective, fmt):
    """Also reads p2pBandwidthLatencyTest and nvbandwidth output (text or -j JSON) into P2P matrix
    records with findings and advice, and `vllm collect-env` / `python -m sglang.check_env` text.

    Read the output of an nccl-tests *_perf binary (any generation; mpirun tags, prompts and NCCL
    INFO lines are skipped) and print its rows, or write them with --output as result records
    (one per size and in/out-of-place) that `ncclprobe recommend` and `report` read.

    Exits 1 when nccl-tests counted wrong values.
    """
    text = read_text_file(file, "nccl-tests output")
    from ncclprobe.pcie.importers import recognise, write_records   # P2P evidence readers (issue 20)
    other = recognise(text, str(file))
    if other is not None:
        if output:
            log.warning("wrote %d records to %s", write_records(other, output), output)
        emit(fmt, other.doc, other.rows, title=other.title, notes=other.notes)
        return other.exit_code
    run = parse_nccl_tests(text)
    name = collective or run.collective
    if name is None:
        log.warning("the output does not name its collective; records say 'unknown' (pass --collective)")
    if output:
        _write(output, to_records(run, source_file=str(file), argv=sys.argv, collective=collective))
    doc = run.to_json()
    doc["collective"] = name
    emit(fmt, doc, _rows(run), title=f"{name or 'unknown collective'}, {run.nranks} ranks, {len(run.rows)} sizes",
         notes=_notes(run))
    wrong = any((r.out_of_place.wrong or 0) + (r.in_place.wrong or 0) for r in run.rows)
    return 1 if wrong or run.out_of_bounds else 0


def _write(output: str, records: list[dict]) -> None:
    header, *rest = records
    header = {k: v for k, v in header.items() if k not in ("record", "schema_version")}
    try:
        with ResultWriter(output, header) as writer:
            for record in rest:
                writer.write(record)
    except FileExistsError as exc:
        raise UsageProblem(f"{output!r} exists; results files are never overwritten: choose another name") from exc
    except OSError as exc:
        raise UsageProblem(f"cannot write {output!r}: {exc.strerror or exc}") from exc
    log.warning("wrote %d result records to %s", len(rest) - 1, output)


def _rows(run) -> list[dict]:
    return [{"size": format_size(r.size_bytes), "size_bytes": r.size_bytes, "type": r.dtype, "oop_time_us": r.out_of_place.time_us,
             "oop_busbw_gbps": r.out_of_place.busbw_gbps, "oop_wrong": r.out_of_place.wrong,
             "ip_time_us": r.in_place.time_us, "ip_busbw_gbps": r.in_place.busbw_gbps, "ip_wrong": r.in_place.wrong}
            for r in run.rows]


def _notes(run) -> list[str]:
    notes = [f"NCCL {run.nccl_version or 'version not printed'}; settings: "
             + (" ".join(f"{k}={v}" for k, v in run.settings.items()) or "none shown")]
    if run.avg_busbw_gbps is not None:
        notes.append(f"avg busbw {run.avg_busbw_gbps} GB/s (nccl-tests' mean over every row)")
    return notes + run.notes
