"""Text rendering of P2P evidence for the table format: matrices, checks, findings, advice.

Lines wrap to `width` (the terminal's, from the CLI) under their first line; None (`--wide`) leaves
them whole."""

from __future__ import annotations

import textwrap

from tabulate import tabulate

from ncclprobe.evidence.node.matrix import Matrix, rows_for_table


def matrix_block(m: Matrix) -> list[str]:
    lines = [f"## {m.label} ({m.unit}) - {m.source}"]
    lines.append(
        tabulate(
            rows_for_table(m), headers="keys", tablefmt="simple", floatfmt=".2f", missingval="-"
        )
    )
    return lines


def check_lines(checks: list[dict], width: int | None = 100) -> list[str]:
    out = ["## platform"]
    for c in checks:
        out += wrap_line(
            f"[{c['status']}] {c['check']}: {c['summary']} (source: {c['source']})", "  ", width
        )
        for unread in c.get("not_readable", [])[:8]:
            out += wrap_line(f"not readable: {unread}", "      ", width)
    return out


def finding_lines(findings: list[dict], advice: list[dict], width: int | None = 100) -> list[str]:
    out = ["## findings"] + ([] if findings else ["  none"])
    for f in findings:
        out += wrap_line(f"[{f['severity']}] {f['code']}: {f['message']}", "  ", width)
    out.append("## advice")
    for a in advice:
        out += wrap_line(
            f"- {a['action']}: {a['reason']} (evidence: {', '.join(a['evidence']) or 'none'})",
            "  ",
            width,
        )
    return out


def wrap_line(text: str, indent: str, width: int | None = 100) -> list[str]:
    if width is None:
        return [indent + text]
    return textwrap.wrap(
        text,
        width=max(40, width),
        initial_indent=indent,
        subsequent_indent=indent + "    ",
        break_on_hyphens=False,
    ) or [indent]
