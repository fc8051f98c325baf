"""The one renderer of a `Report`, in the three formats every judging command offers.

- json: the report's document, as the command's schema has it (`Report.document`);
- csv: the report's rows, complete (`Report.rows`);
- table: the report's sections in order, for the terminal: `Lines` wrapped to its width, `Table`s
  handed on whole (the CLI's emitter, `ncclprobe.cli.output`, fits them), and at `FINDINGS` the
  ranked findings, each with its severity, confidence and cost, its reasoning, the numbers it rests
  on and its next step, then what was ruled out and what was not checked.

A next step (`ncclprobe.diagnose.commands`: command lines and `# ` remarks) prints every command on a
line of its own and whole at any width, since a wrapped command cannot be pasted; its remarks wrap
into further `# ` lines. `width` None (`--wide`) leaves every line whole.
"""

from __future__ import annotations

import textwrap

from ncclprobe.diagnose.report import Lines, Report, Table
from ncclprobe.rank_ranges import ranges_text


def table_blocks(report: Report, width: int | None) -> list[Lines | Table]:
    """The table format: each section in order, text fitted to `width`, tables whole (`width`
    None, --wide: a table's rows as it gives them whole, where it shortens some cells)."""
    blocks: list[Lines | Table] = []
    for section in report.sections:
        if isinstance(section, Lines):
            blocks.append(Lines(fit(section.lines, width)))
        elif isinstance(section, Table):
            whole = width is None and section.wide_rows is not None
            blocks.append(
                Table(section.wide_rows or [], section.title, section.notes) if whole else section
            )
        else:  # FINDINGS: where the ranked findings go
            blocks.append(Lines(fit(finding_lines(report, width), width)))
    return [b for b in blocks if not isinstance(b, Lines) or b.lines]


def text(report: Report, width: int | None) -> str:
    """The table format of a report made of text only (tables are left to the CLI's emitter)."""
    return "\n".join(
        line
        for block in table_blocks(report, width)
        if isinstance(block, Lines)
        for line in block.lines
    )


def finding_lines(report: Report, width: int | None) -> list[str]:
    """The ranked findings, then the ruled-out and not-checked hypotheses."""
    lines: list[str] = []
    if not report.findings:
        lines.append("# no findings: nothing above informational")
    for index, f in enumerate(report.findings, 1):
        lines.append(
            f"{index}. [{f.severity}, {f.confidence} confidence{f.cost_header()}] {f.title}"
        )
        lines += _wrap(f.detail, "   ", width)
        shown = unsaid_evidence(f.evidence, f.detail)
        if shown:  # a finding of missing evidence (no step found) has none to show
            lines += _wrap("evidence: " + evidence_text(shown), "   ", width)
        lines += next_lines(f.next_command, "   ")
    if report.ruled_out:
        lines.append("ruled out:")
        lines += [f"  - {r.hypothesis}: {r.reason}" for r in report.ruled_out]
    if report.not_checked:
        lines.append("not checked (missing evidence):")
        for n in report.not_checked:
            lines.append(f"  - {n.hypothesis}: {n.missing}")
            lines += next_lines(n.next_command, "    ")
    return lines


class Command(str):
    """A command line of a next step: printed whole at any width (a wrapped command cannot be
    pasted: each line would run alone)."""


class Remark(str):
    """A `# ` line of a next step: wrapped into further `# ` lines under its own indent."""


def next_lines(snippet: str, indent: str) -> list[str]:
    """A next step (diagnose.commands: command lines and `# ` remarks) as `next:` lines: every
    command on a line of its own, its trailing `  # ` remark on the lines after it."""
    if not snippet:
        return []
    lines: list[str] = []
    lead = indent + "next: "
    for part in snippet.split("\n"):
        command, _, remark = ("", "", part[2:]) if part.startswith("# ") else part.partition("  # ")
        if command:
            lines.append(Command(lead + command))
            lead = " " * len(lead)
        if remark:
            lines.append(Remark(lead + "# " + remark))
            lead = " " * len(lead)
    return lines


def fit(lines: list[str], width: int | None) -> list[str]:
    """Every line wrapped to the terminal: `#` lines under their first words, a next step's remark
    under its `# `, the others under their own indent; a next step's command never (--wide: every
    line as it is)."""
    if width is None:
        return list(lines)
    fitted = []
    for line in lines:
        if len(line) <= width or isinstance(line, Command):
            fitted.append(line)
            continue
        lead = len(line) - len(line.lstrip())
        if isinstance(line, Remark):
            indent = " " * (lead + len("next: ") if line.lstrip().startswith("next: ") else lead)
            indent += "# "
        else:
            indent = "#   " if line.startswith("#") else " " * (lead + 3)
        fitted += textwrap.wrap(
            line[lead:],
            width=width,
            initial_indent=line[:lead],  # kept even where the first word alone is too long
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        ) or [line]
    return fitted


def unsaid_evidence(evidence: dict, detail: str) -> dict:
    """The evidence the table shows under a finding: the entries its detail has not already
    printed. An entry in QUOTED_IN_DETAIL (the failure lines of `not-explained`, each with its
    source, which the detail quotes verbatim) is left out there when every line's text is in the
    detail, so no line prints twice; the JSON keeps every entry."""
    return {
        k: v
        for k, v in evidence.items()
        if k not in QUOTED_IN_DETAIL or not all(t in detail for t in _line_texts(v))
    }


# evidence entries a finding's detail quotes in full by construction (`failure_lines.not_explained_
# finding`: the lines verbatim, with their source and number), shown once, in the detail
QUOTED_IN_DETAIL = frozenset({"not_explained"})


def _line_texts(value: object) -> list[str]:
    """The `text` of every line in a FailureLines.to_json list (and a marker when there is none,
    so an entry without lines is shown)."""
    texts = [
        line.get("text", "\0")
        for collection in (value if isinstance(value, list) else [])
        if isinstance(collection, dict)
        for line in collection.get("lines", [])
        if isinstance(line, dict)
    ]
    return [t if isinstance(t, str) else "\0" for t in texts] or ["\0"]


def evidence_text(value: object) -> str:
    """Every number a finding rests on, nested runs and per-rank problems included (the JSON
    output has the same values unrounded); floats to 4 significant digits so a line stays readable.
    Per-rank values and rank sets of more than 8 ranks are said as ranges: ranks that share a
    value together ("0-84, 86-255={...}"), a rank list as "[0-84, 86-255]"."""
    if isinstance(value, dict) and len(value) > 8 and all(str(k).isdigit() for k in value):
        by_value: dict[str, list[int]] = {}
        for k, v in value.items():
            text = "{" + evidence_text(v) + "}" if isinstance(v, dict) else evidence_text(v)
            by_value.setdefault(text, []).append(int(k))
        return ", ".join(f"{ranges_text(ks)}={v}" for v, ks in by_value.items())
    if isinstance(value, dict):
        return ", ".join(
            f"{k}={evidence_text(v) if not isinstance(v, dict) else '{' + evidence_text(v) + '}'}"
            for k, v in value.items()
        )
    if isinstance(value, list):
        if len(value) > 8 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return "[" + ranges_text(value) + "]"
        return "[" + "; ".join(evidence_text(v) for v in value) + "]"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _wrap(text: str, indent: str, width: int | None) -> list[str]:
    return textwrap.wrap(
        text,
        width=width or len(indent) + len(text),
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )
