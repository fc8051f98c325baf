"""`ncclprobe topo --check` judged: the P2P rule set over the gathered evidence (`ncclprobe.gather.p2p`),
the platform checks, NCCL's model against the measurement, and the advice, as one Report.

The P2P rule set (`P2P`) is what `import` runs over a tool's matrices too, and what `diagnose
--topo-check` adds to its own: findings over the matrices (slow, asymmetric, refused pairs, wrong
data, a hang). The report's JSON is schema `topo-check` v1, as `topo --check` always wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ncclprobe.diagnose.p2p.advice import advise
from ncclprobe.diagnose.p2p.findings import P2PFinding, matrix_findings, reported_corrupt
from ncclprobe.diagnose.p2p.nccl_model import model_disagreements
from ncclprobe.diagnose.p2p.platform import judge_platform
from ncclprobe.diagnose.p2p.render import advice_lines, topo_check_lines
from ncclprobe.diagnose.report import Lines, Report, RuleSet, Table, judge
from ncclprobe.errors import require_extra
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.live.sysfs import crossing
from ncclprobe.evidence.node.matrix import Matrix, rows_for_table
from ncclprobe.evidence.p2p import P2PEvidence
from ncclprobe.safe_output import write_text

SCHEMA_VERSION = 1


def pair_findings(ev: Evidence) -> list[P2PFinding]:
    """Findings over the P2P matrices, the wrong data a tool or our copy checks reported, a hang."""
    p2p = ev.p2p
    if p2p is None:  # the rule set needs it (`P2P`): nothing to judge
        return []
    findings = matrix_findings(
        p2p.matrices, p2p.peer_access, where=_where(p2p), corrupt=p2p.copy_checks()
    )
    if p2p.tool:
        findings = reported_corrupt(p2p.tool, p2p.reported_corrupt) + findings
    measurement = p2p.measurement or {}
    if measurement.get("status") == "hang":
        hung = tuple(measurement.get("hung") or ())
        findings.insert(0, P2PFinding("error", "p2p-hang", measurement["reason"], hung))
    return findings


def _where(p2p: P2PEvidence) -> Callable[[int, int], str | None]:
    """What a GPU pair crosses (a PCIe switch, a root complex) where the PCIe tree is known."""
    paths = p2p.gpu_paths

    def where(i: int, j: int) -> str | None:
        one, other = (paths[i] if i < len(paths) else None), (paths[j] if j < len(paths) else None)
        return crossing(one, other) if one and other else None

    return where


P2P = RuleSet("p2p", (pair_findings,), needs=("p2p",))


def check_report(ev: Evidence) -> Report:
    """`topo --check`: the P2P rule set, the platform checks, NCCL's model, advice; FINDINGS on an
    error, NOTHING_HERE (exit 3, as plain `topo`) when no GPU pair or host copy could be measured
    here, whatever the platform checks read: the question was not answered."""
    p2p = ev.p2p
    if p2p is None:
        raise ValueError("topo --check judges gathered P2P evidence (gather.p2p)")
    measurement = p2p.measurement or {}
    report = judge(
        ev,
        (P2P,),
        kind="topo-check",
        fails_at="error",
        answered=measurement.get("status") != "unavailable",
    )
    checks = judge_platform(p2p.platform) if p2p.platform else []
    pairs = [f for f in report.findings if isinstance(f, P2PFinding)]  # the P2P set's, all of them
    advice = advise(pairs, checks, p2p.topology, measured=p2p.measured)
    nccl = p2p.nccl or {}
    disagree = model_disagreements(
        nccl.get("topology_obj"), nccl.get("graphs_obj") or [], p2p.matrices
    )
    report.document = {
        "schema_version": SCHEMA_VERSION,
        "kind": "topo-check",
        "measurement": {
            k: measurement.get(k) for k in ("status", "reason", "devices", "peer_access", "notes")
        },
        "matrices": [m.to_record() for m in p2p.matrices],
        "platform": [c.to_json() for c in checks],
        "nccl": {k: v for k, v in nccl.items() if not k.endswith("_obj")},
        "nccl_model_vs_measured": disagree,
        "findings": [f.to_json() for f in report.findings],
        "advice": [a.to_json() for a in advice],
    }
    report.rows = [
        {"matrix": m.source, "row": label, **dict(zip(m.cols, values))}
        for m in p2p.matrices
        for label, values in zip(m.rows, m.values)
    ]
    head, tail, found = topo_check_lines(report.document)
    matrices = [
        Table(rows_for_table(m), title=f"{m.label} ({m.unit}) - {m.source}") for m in p2p.matrices
    ]
    report.sections = [head, *matrices, tail, found]
    # what diagnose --topo-check prints beside its own findings: all but the findings
    report.data["beside"] = [head, *matrices, tail, Lines(advice_lines(report.document["advice"]))]
    return report


def check_output_dir(directory: str | Path) -> None:
    """Refuse, before anything is measured, a directory that holds anything (an earlier check, the
    user's own files): the one directory rule of `ncclprobe.safe_output`, so no stale file sits beside
    new results."""
    from ncclprobe.safe_output import check_output_dir as refuse_unless_new

    require_extra("matplotlib", "report", "the P2P heatmap that --check --output writes")
    refuse_unless_new(directory, what="--output", has_force=False)


def save(doc: dict, directory: str | Path) -> list[Path]:
    """topo-check.json and NCCL's XML dumps into `directory`; never overwrite, never leave half a file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"topo-check.json": json.dumps(doc, indent=2, allow_nan=False) + "\n"}
    for key, name in (("topology_xml", "nccl-topo.xml"), ("graphs_xml", "nccl-graph.xml")):
        if doc.get("nccl", {}).get(key):
            files[name] = doc["nccl"][key]
    check_output_dir(directory)
    written = [
        write_text(directory / name, text, what="--output file")  # whole, never over a file
        for name, text in files.items()
    ]
    from ncclprobe.report.heatmap import write_heatmap

    picture = write_heatmap(
        [Matrix.from_record(r) for r in doc.get("matrices", [])],
        directory / "p2p-heatmap.png",
        "topo --check",
    )
    return written + ([picture] if picture else [])
