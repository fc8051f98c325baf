"""Text rendering of P2P evidence for the table format: matrices, checks, findings, advice."""

from __future__ import annotations

import textwrap

from tabulate import tabulate

from ncclprobe.pcie.matrix import Matrix, rows_for_table


def matrix_block(m: Matrix) -> list[str]:
    lines = [f"## {m.label} ({m.unit}) - {m.source}"]
    lines.append(tabulate(rows_for_table(m), headers="keys", tablefmt="simple", floatfmt=".2f", missingval="-"))
    return lines


def check_lines(checks: list[dict]) -> list[str]:
    out = ["## platform"]
    for c in checks:
        out += _wrap(f"[{c['status']}] {c['check']}: {c['summary']} (source: {c['source']})", "  ")
        out += [f"      not readable: {u}" for u in c.get("not_readable", [])[:8]]
    return out


def finding_lines(findings: list[dict], advice: list[dict]) -> list[str]:
    out = ["## findings"] + ([] if findings else ["  none"])
    for f in findings:
        out += _wrap(f"[{f['severity']}] {f['code']}: {f['message']}", "  ")
    out.append("## advice")
    for a in advice:
        out += _wrap(f"- {a['action']}: {a['reason']} (evidence: {', '.join(a['evidence']) or 'none'})", "  ")
    return out


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=100, initial_indent=indent, subsequent_indent=indent + "    ") or [indent]
