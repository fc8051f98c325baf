"""`ncclprobe import` for P2P evidence: recognise p2pBandwidthLatencyTest, nvbandwidth and collect-env
text, and turn each into the same document (matrix records, findings, advice) that `topo --check`
prints. The import command calls `recognise` first and falls back to nccl-tests when it returns None.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.evidence.collect_env import looks_like_collect_env, parse_collect_env
from ncclprobe.evidence.nvbandwidth import looks_like_nvbandwidth, parse_nvbandwidth
from ncclprobe.evidence.p2p_test_output import looks_like_p2p_test, parse_p2p_test
from ncclprobe.pcie.advice import advise
from ncclprobe.pcie.findings import matrix_findings, reported_corrupt
from ncclprobe.safe_output import dumps_json, write_text
from ncclprobe.verdict import Verdict


@dataclass
class Imported:
    kind: str
    doc: dict
    rows: list[dict]
    title: str
    notes: list[str]
    verdict: Verdict


def recognise(text: str, source_file: str) -> Imported | None:
    if looks_like_p2p_test(text):
        parsed = parse_p2p_test(text)
        return _matrices("p2pBandwidthLatencyTest", parsed, parsed.peer_access, source_file)
    if looks_like_nvbandwidth(text):
        parsed = parse_nvbandwidth(text)
        return _matrices("nvbandwidth", parsed, None, source_file)
    if looks_like_collect_env(text) and "# nThread" not in text:
        parsed = parse_collect_env(text)
        doc = {**parsed.to_json(), "source_file": source_file}
        rows = [{"variable": k, "value": v} for k, v in parsed.nccl_settings.items()]
        versions = ", ".join(f"{k} {v}" for k, v in parsed.versions.items())
        notes = [f"NCCL: {src} {ver}" for src, ver in parsed.nccl.items()] + parsed.notes
        if parsed.topology:
            notes.append(
                "topology: " + ", ".join(f"{k}={v}" for k, v in parsed.topology.summary.items())
            )
        notes.append("lint these settings: ncclprobe knobs --lint --collect-env " + source_file)
        return Imported("collect-env", doc, rows, f"{parsed.tool}: {versions}", notes, Verdict.FINE)
    return None


def _matrices(tool: str, parsed, access, source_file: str) -> Imported:
    findings = matrix_findings(parsed.matrices, access)
    findings = reported_corrupt(tool, getattr(parsed, "corrupt", [])) + findings
    advice = advise(findings, [], None)
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
    notes += parsed.notes
    gpus = max(
        len(
            {label for m in parsed.matrices for label in m.rows + m.cols if label.startswith("GPU")}
        ),
        len(parsed.devices),
    )
    return Imported(
        tool,
        doc,
        rows,
        f"{tool}: {len(parsed.matrices)} matrices, {gpus} GPU(s)",
        notes,
        Verdict.of(any(f.severity == "error" for f in findings)),
    )


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


def write_records(imported: Imported, output: str, force: bool = False) -> int:
    """The matrix records (and the findings) as JSONL, whole or not at all; an existing file only
    with `force` (`ncclprobe.safe_output`)."""
    records = [
        {
            "record": "header",
            "schema_version": 1,
            "kind": imported.kind,
            "source_file": imported.doc.get("source_file"),
        }
    ]
    records += imported.doc.get("matrices", [])
    records += [{"record": "finding", **f} for f in imported.doc.get("findings", [])]
    write_text(
        output,
        "".join(dumps_json(record) + "\n" for record in records),
        force=force,
        what="--output",
    )
    return len(records) - 1
