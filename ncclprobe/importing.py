"""`ncclprobe import`: recognise what a file holds and turn it into records, through a table.

`IMPORTERS` is tried in order; the first whose `sniff` accepts the text loads it. Each importer
returns an `Imported`: what to print (one block per run: title, rows, notes), the JSON document,
the results files to write (`record_sets`, header first) and whether it found a problem (exit 1).
A new kind of file is one more entry here (sniff + load), nothing else changes; the nccl-tests
text reader is the last entry, so its message (no result table) answers unrecognised files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl_tests import NcclTestsRun
from ncclprobe.evidence.nccl_tests_json import looks_like_json, parse_nccl_tests_json
from ncclprobe.evidence.nccl_tests_records import to_records
from ncclprobe.evidence.nccl_tests_split import parse_runs
from ncclprobe.sizes import format_size
from ncclprobe.verdict import Verdict


@dataclass(frozen=True)
class ImportOptions:
    source: str  # the file's path, for messages and headers
    argv: list[str] = field(default_factory=list)
    collective: str | None = None  # names the collective when the file does not
    labels: list[dict[str, str]] = field(
        default_factory=list
    )  # --settings: one for all runs, or one per run


@dataclass
class Block:
    title: str
    rows: list[dict]
    notes: list[str]


@dataclass
class Imported:
    kind: str
    doc: dict
    blocks: list[Block]
    record_sets: list[list[dict]] = field(
        default_factory=list
    )  # results files to write, header first
    verdict: Verdict = (
        Verdict.FINE
    )  # FINDINGS: nccl-tests counted wrong values, or the matrices show errors
    write: Callable[..., int] | None = None  # an importer with its own file format writes it itself


@dataclass(frozen=True)
class Importer:
    name: str
    sniff: Callable[[str], bool]
    load: Callable[[str, ImportOptions], Imported]


def import_text(text: str, options: ImportOptions) -> Imported:
    for importer in IMPORTERS:
        if importer.sniff(text):
            return importer.load(text, options)
    raise UsageProblem(
        f"{options.source}: not a file ncclprobe can import "
        f"(it reads {', '.join(i.name for i in IMPORTERS)})"
    )


def _nccl_tests_json(text: str, options: ImportOptions) -> Imported:
    return _nccl_tests(
        [parse_nccl_tests_json(text, options.source)], [], options, "nccl-tests -J JSON"
    )


def _nccl_tests_text(text: str, options: ImportOptions) -> Imported:
    runs, notes = parse_runs(text)
    return _nccl_tests(runs, notes, options, "nccl-tests text")


def _nccl_tests(
    runs: list[NcclTestsRun], notes: list[str], options: ImportOptions, kind: str
) -> Imported:
    labels = _labels_per_run(options.labels, len(runs))
    record_sets = [
        to_records(
            run,
            source_file=options.source,
            argv=options.argv,
            collective=options.collective,
            labels=label,
        )
        for run, label in zip(runs, labels)
    ]
    blocks = [
        _block(run, records, options, index, len(runs))
        for index, (run, records) in enumerate(zip(runs, record_sets), 1)
    ]
    docs = []
    for run, records in zip(runs, record_sets):
        doc = run.to_json()
        doc["collective"] = options.collective or run.collective
        doc["settings"] = records[1]["settings"]
        docs.append(doc)
    doc = (
        docs[0]
        if len(docs) == 1
        else {"schema_version": 1, "kind": "nccl-tests-runs", "runs": docs, "notes": notes}
    )
    if notes:
        blocks[0].notes += notes
    return Imported(
        kind=kind,
        doc=doc,
        blocks=blocks,
        record_sets=record_sets,
        verdict=Verdict.of(any(r.wrong for r in runs)),
    )


def _labels_per_run(labels: list[dict[str, str]], nruns: int) -> list[dict[str, str]]:
    if not labels:
        return [{}] * nruns
    if len(labels) == 1:
        return labels * nruns
    if len(labels) != nruns:
        raise UsageProblem(
            f"--settings was given {len(labels)} times but the file holds {nruns} run(s): give it once "
            "(for every run) or once per run, in the order of the runs"
        )
    return labels


def _block(
    run: NcclTestsRun, records: list[dict], options: ImportOptions, index: int, total: int
) -> Block:
    name = options.collective or run.collective or "unknown collective"
    where = f"run {index} of {total}: " if total > 1 else ""
    settings = records[1]["settings"]
    notes = [
        f"NCCL {run.nccl_version or 'version not printed'}; settings: "
        + (" ".join(f"{k}={v}" for k, v in settings.items()) or "none shown")
    ]
    labelled = records[1]["proof"]["labelled"]
    if labelled:
        notes.append(
            "labelled by --settings (not shown by the file): "
            + " ".join(f"{k}={v}" for k, v in labelled.items())
        )
    if run.avg_busbw_gbps is not None:
        notes.append(f"avg busbw {run.avg_busbw_gbps} GB/s (nccl-tests' mean over every row)")
    if options.collective is None and run.collective is None:
        notes.append(
            "the output does not name its collective: records say 'unknown' (pass --collective)"
        )
    ranks = f"{run.nranks} ranks" if run.nranks else "ranks not shown"
    title = f"{where}{name}, {ranks}, {len(run.rows)} sizes"
    return Block(title=title, rows=_rows(run), notes=notes + run.notes)


def _rows(run: NcclTestsRun) -> list[dict]:
    """The table as the file printed it: before v2.13 the check column is the max error, not a count."""

    def cell(m, key):
        return getattr(m, key) if m is not None else None

    check, key = ("error", "max_error") if run.format == "old" else ("wrong", "wrong")
    return [
        {
            "size": format_size(r.size_bytes),
            "size_bytes": r.size_bytes,
            "type": r.dtype,
            "oop_time_us": cell(r.out_of_place, "time_us"),
            "oop_busbw_gbps": cell(r.out_of_place, "busbw_gbps"),
            f"oop_{check}": cell(r.out_of_place, key),
            "ip_time_us": cell(r.in_place, "time_us"),
            "ip_busbw_gbps": cell(r.in_place, "busbw_gbps"),
            f"ip_{check}": cell(r.in_place, key),
        }
        for r in run.rows
    ]


def _is_p2p_evidence(text: str) -> bool:
    from ncclprobe.evidence.collect_env import looks_like_collect_env
    from ncclprobe.evidence.nvbandwidth import looks_like_nvbandwidth
    from ncclprobe.evidence.p2p_test_output import looks_like_p2p_test

    return (
        looks_like_p2p_test(text)
        or looks_like_nvbandwidth(text)
        or (looks_like_collect_env(text) and "# nThread" not in text)
    )


def _p2p_evidence(text: str, options: ImportOptions) -> Imported:
    """p2pBandwidthLatencyTest, nvbandwidth and collect-env text (ncclprobe.pcie, issue 20)."""
    from ncclprobe.pcie.importers import recognise, write_records

    found = recognise(text, options.source)
    return Imported(
        kind=found.kind,
        doc=found.doc,
        blocks=[Block(found.title, found.rows, found.notes)],
        verdict=found.verdict,
        write=lambda output, force=False: write_records(found, output, force),
    )


IMPORTERS: list[Importer] = [
    Importer(
        "p2pBandwidthLatencyTest / nvbandwidth / collect-env text", _is_p2p_evidence, _p2p_evidence
    ),
    Importer("nccl-tests -J JSON", looks_like_json, _nccl_tests_json),
    Importer("nccl-tests text output", lambda text: True, _nccl_tests_text),  # last: the fallback
]
