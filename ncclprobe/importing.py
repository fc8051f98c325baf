"""`ncclprobe import`: recognise what a file holds and turn it into records, through a table.

`IMPORTERS` is tried in order; the first whose `sniff` accepts the text loads it through its reader
in `ncclprobe.evidence` (typed records: `Matrix`es, `CollectEnv`, `NcclTestsRun`s) and runs the rule
set for what it holds (P2P matrices: the P2P rules `topo --check` runs, `ncclprobe.diagnose.p2p`;
nccl-tests runs: the wrong values they counted). Each importer returns the one `Report`
(`ncclprobe.diagnose.report`): what to print (one table per run: title, rows, notes), the JSON
document, the findings, and in `data` the files to write (results files: `record_sets`, header
first; P2P matrices: `own_format`, written by `write_records`). A new kind of file is one more entry
here (sniff + load), nothing else changes; the nccl-tests text reader is the last entry, so its
message (no result table) answers unrecognised files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ncclprobe.diagnose.p2p.advice import advise
from ncclprobe.diagnose.p2p.check import P2P
from ncclprobe.diagnose.p2p.findings import P2PFinding
from ncclprobe.diagnose.report import Report, RuleSet, Table, judge
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.failure_lines import not_explained_finding
from ncclprobe.evidence.nccl.nccl_tests_json import looks_like_json, parse_nccl_tests_json
from ncclprobe.evidence.nccl.nccl_tests_records import to_records
from ncclprobe.evidence.nccl.nccl_tests_run import NcclTestsRun
from ncclprobe.evidence.nccl.nccl_tests_split import parse_runs
from ncclprobe.evidence.node.collect_env import looks_like_collect_env, parse_collect_env
from ncclprobe.evidence.node.nvbandwidth import looks_like_nvbandwidth, parse_nvbandwidth
from ncclprobe.evidence.node.p2p_test_output import looks_like_p2p_test, parse_p2p_test
from ncclprobe.evidence.p2p import P2PEvidence
from ncclprobe.findings import Finding
from ncclprobe.safe_output import dumps_json, write_text
from ncclprobe.secrets import mask_text
from ncclprobe.sizes import format_size


@dataclass(frozen=True)
class ImportOptions:
    source: str  # the file's path, for messages and headers
    argv: list[str] = field(default_factory=list)
    collective: str | None = None  # names the collective when the file does not
    labels: list[dict[str, str]] = field(
        default_factory=list
    )  # --settings: one for all runs, or one per run


def run_failures(ev: Evidence) -> list[Finding]:
    """nccl-tests' own verdicts: a run that counted wrong values moved wrong data; a run that shows
    a failure (an explained class, an NCCL WARN line, a line that looks like a failure) failed."""
    found = []
    for index, run in enumerate(ev.nccl_tests, 1):
        which = f" (run {index} of {len(ev.nccl_tests)})" if len(ev.nccl_tests) > 1 else ""
        if run.wrong:
            found.append(
                Finding(
                    rule="nccl-tests-wrong",
                    severity="error",
                    confidence="high",
                    title=f"nccl-tests counted wrong values{which}",
                    detail=f"wrong results: {run.wrong_summary()}: the collective returned wrong "
                    "data there.",
                )
            )
        failed = _failure_notes(run)
        if failed:
            found.append(
                Finding(
                    rule="nccl-tests-failed",
                    severity="error",
                    confidence="high",
                    title=f"the nccl-tests run failed{which}",
                    detail="; ".join(failed),
                )
            )
        if not run.rows:  # a run that measured nothing is no result, whether or not a line says why
            found.append(
                Finding(
                    rule="nccl-tests-nothing-measured",
                    severity="error",
                    confidence="high",
                    title=f"the nccl-tests run measured nothing{which}: no result row",
                    detail=run.notes[0],
                )
            )
    return found


NCCL_TESTS = RuleSet("nccl-tests", (run_failures,), needs=("nccl_tests",))


def reader_failure_lines(ev: Evidence) -> list[Finding]:
    """Lines a tool's output holds that look like a failure and no class explains: the one
    not-explained finding (`evidence.failure_lines`)."""
    sources = [ev.p2p.failure_lines] if ev.p2p and ev.p2p.failure_lines else []
    sources += [ev.collect_env.failure_lines] if ev.collect_env else []
    found = not_explained_finding(sources)
    return [found] if found else []


# a tool's failure lines fail the verdict even as a warning: the run may have failed unnamed
READER_FAILURES = RuleSet(
    "failure lines", (reader_failure_lines,), needs=("p2p", "collect_env"), fails_at="warning"
)


@dataclass(frozen=True)
class Importer:
    name: str
    sniff: Callable[[str], bool]
    load: Callable[[str, ImportOptions], Report]


def import_text(text: str, options: ImportOptions) -> Report:
    for importer in IMPORTERS:
        if importer.sniff(text):
            return importer.load(text, options)
    raise UsageProblem(
        f"{options.source}: not a file ncclprobe can import "
        f"(it reads {', '.join(i.name for i in IMPORTERS)})"
    )


def _nccl_tests_json(text: str, options: ImportOptions) -> Report:
    return _nccl_tests(
        [parse_nccl_tests_json(text, options.source)], [], options, "nccl-tests -J JSON"
    )


def _nccl_tests_text(text: str, options: ImportOptions) -> Report:
    runs, notes = parse_runs(text)
    return _nccl_tests(runs, notes, options, "nccl-tests text")


def _nccl_tests(
    runs: list[NcclTestsRun], notes: list[str], options: ImportOptions, kind: str
) -> Report:
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
    report = judge(Evidence(nccl_tests=runs), (NCCL_TESTS,), kind=kind, fails_at="error")
    report.document, report.sections = doc, list(blocks)  # each block's notes say what failed
    report.rows = [row for block in blocks for row in block.rows]
    report.data["record_sets"] = record_sets
    return report


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
) -> Table:
    name = options.collective or run.collective or "unknown collective"
    where = f"run {index} of {total}: " if total > 1 else ""
    settings = records[1]["settings"]
    tests = run.nccl_tests_version or ""
    if tests and not tests.startswith("rccl-tests"):
        tests = f"nccl-tests {tests}"
    notes = [
        (f"{tests}; " if tests else "")
        + f"NCCL {run.nccl_version or 'version not printed'}; settings: "
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
    stopped = ": measured nothing (no result row)" if not run.rows else ""
    title = f"{where}{name}, {ranks}, {len(run.rows)} sizes{stopped}"
    return Table(_rows(run), title=title, notes=_failure_notes(run) + notes + run.notes)


def _failure_notes(run: NcclTestsRun) -> list[str]:
    """What failed, first: the explained classes, the wrong results, then each line not explained."""
    notes = [f"{f['severity']}: {f['message']}; fix: {f['fix']}" for f in run.failures]
    wrong = run.wrong_summary()
    if wrong:
        notes.append(f"error: wrong results: {wrong}")
    notes += [f"not explained (NCCL WARN): {mask_text(w)}" for w in run.warn_lines]
    return notes + not_explained_notes(run.not_explained)


def not_explained_notes(found) -> list[str]:
    """A reader's failure lines no class explained, one note each (`evidence.failure_lines`)."""
    if not found:
        return []
    notes = [
        f"not explained: line {line.number}: {line.text}"
        + (f" (x{line.count})" if line.count > 1 else "")
        for line in found.lines
    ]
    return notes + ([f"not explained: and {found.more} more line(s)"] if found.more else [])


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


def _p2p_test(text: str, options: ImportOptions) -> Report:
    parsed = parse_p2p_test(text, options.source)
    return _matrices("p2pBandwidthLatencyTest", parsed, parsed.peer_access, options.source)


def _nvbandwidth(text: str, options: ImportOptions) -> Report:
    return _matrices("nvbandwidth", parse_nvbandwidth(text, options.source), None, options.source)


def _matrices(tool: str, parsed, access, source_file: str) -> Report:
    """P2P matrices judged by the P2P rule set, with the advice of `topo --check`."""
    p2p = P2PEvidence(
        parsed.matrices,
        access,
        tool=tool,
        reported_corrupt=list(getattr(parsed, "corrupt", [])),
        failure_lines=parsed.failure_lines,
    )
    report = judge(Evidence(p2p=p2p), (P2P, READER_FAILURES), kind=tool, fails_at="error")
    findings = [f for f in report.findings if isinstance(f, P2PFinding)]  # not-explained aside
    # nothing measured and nothing found (a paste of the peer access lines): no advice to give
    advice = advise(findings, [], None) if parsed.matrices or findings else []
    if parsed.failure_lines:  # the tool failed: "nothing to change" is not what its output says
        advice = [a for a in advice if a.action != "nothing to change"]
    doc = {
        **parsed.to_json(),
        "source_file": source_file,
        "findings": [f.to_json() for f in findings],
        "advice": [a.to_json() for a in advice],
    }
    rows = [
        {
            "matrix": m.label,
            "unit": m.unit,
            "from": label,
            **{c: (None if v is None else round(v, 2)) for c, v in zip(m.cols, values)},
        }
        for m in parsed.matrices
        for label, values in zip(m.rows, m.values)
    ]
    notes = [f"[{f.severity}] {f.code}: {f.message}" for f in findings]
    shown = {f.code for f in findings}  # a finding printed above is named, not repeated
    notes += [
        f"advice: {a.action} ("
        + (
            f"evidence: {', '.join(a.evidence)}"
            if a.setting and set(a.evidence) <= shown
            else a.reason
        )
        + ")"
        for a in advice
    ]
    notes += parsed.notes + not_explained_notes(parsed.failure_lines)
    gpus = max(
        len(
            {label for m in parsed.matrices for label in m.rows + m.cols if label.startswith("GPU")}
        ),
        len(parsed.devices),
    )
    return _own_format(
        report, doc, f"{tool}: {len(parsed.matrices)} matrices, {gpus} GPU(s)", rows, notes
    )


def _is_collect_env(text: str) -> bool:
    return looks_like_collect_env(text) and "# nThread" not in text


def _collect_env(text: str, options: ImportOptions) -> Report:
    parsed = parse_collect_env(text, options.source)
    doc = {**parsed.to_json(), "source_file": options.source}
    rows = [{"variable": k, "value": v} for k, v in parsed.nccl_settings.items()]
    versions = ", ".join(f"{k} {v}" for k, v in parsed.versions.items())
    notes = [f"NCCL: {src} {ver}" for src, ver in parsed.nccl.items()] + parsed.notes
    if parsed.topology:
        notes.append(
            "topology: " + ", ".join(f"{k}={v}" for k, v in parsed.topology.summary.items())
        )
    notes.append("lint these settings: ncclprobe knobs --lint --collect-env " + options.source)
    notes += not_explained_notes(parsed.failure_lines)
    report = judge(Evidence(collect_env=parsed), (READER_FAILURES,), kind="collect-env")
    return _own_format(report, doc, f"{parsed.tool}: {versions}", rows, notes)


def _own_format(report: Report, doc: dict, title: str, rows: list[dict], notes) -> Report:
    """An import that writes its own records (P2P matrices and their findings), not results: one
    block, a matrix's rows as a table of their own under its title."""
    sections = matrix_sections(rows)
    if sections[0][0] is None:
        report.sections = [Table(rows, title=title, notes=notes)]
    else:
        report.sections = [Table([], title=title, notes=notes)]
        report.sections += [Table(part, title=name) for name, part in sections]
    report.document, report.rows, report.data["own_format"] = doc, rows, True
    return report


def matrix_sections(rows: list[dict]) -> list[tuple[str | None, list[dict]]]:
    """A table's rows as one section per matrix, titled `bandwidth uni P2P=disabled ce (GB/s)`, without
    the matrix and unit columns: in every row the 29-character title wrapped over two lines at 100
    columns and doubled an 8x8 matrix's height. Rows of no matrix: one untitled section. (CSV and
    JSON keep every column in every row.)"""
    if not rows or "matrix" not in rows[0]:
        return [(None, rows)]
    sections: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["matrix"], row.get("unit"))
        sections.setdefault(key, []).append(
            {k: v for k, v in row.items() if k not in ("matrix", "unit")}
        )
    return [
        (f"{label} ({unit})" if unit else label, part) for (label, unit), part in sections.items()
    ]


def write_records(imported: Report, output: str, force: bool = False) -> int:
    """The matrix records (and the findings) as JSONL, whole or not at all; an existing file only
    with `force` (`ncclprobe.safe_output`)."""
    records = [
        {
            "record": "header",
            "schema_version": 1,
            "kind": imported.kind,
            "source_file": imported.document.get("source_file"),
        }
    ]
    records += imported.document.get("matrices", [])
    records += [{"record": "finding", **f} for f in imported.document.get("findings", [])]
    write_text(
        output,
        "".join(dumps_json(record) + "\n" for record in records),
        force=force,
        what="--output",
    )
    return len(records) - 1


IMPORTERS: list[Importer] = [
    Importer("p2pBandwidthLatencyTest", looks_like_p2p_test, _p2p_test),
    Importer("nvbandwidth", looks_like_nvbandwidth, _nvbandwidth),
    Importer("collect-env text", _is_collect_env, _collect_env),
    Importer("nccl-tests -J JSON", looks_like_json, _nccl_tests_json),
    Importer("nccl-tests text output", lambda text: True, _nccl_tests_text),  # last: the fallback
]
