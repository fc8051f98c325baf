"""Render report sections as Markdown; figures are linked by relative path (PNG, with the SVG beside)."""

from __future__ import annotations

from pathlib import Path

from ncclprobe.report.content import Section, cell_text


def render(title: str, sections: list[Section], out_dir: Path) -> str:
    lines = [f"# {title}", ""]
    for section in sections:
        lines += [f"## {section.heading}", ""]
        for kind, value in section.blocks:
            lines += _block(kind, value, out_dir) + [""]
    return "\n".join(lines)


def _block(kind: str, value, out_dir: Path) -> list[str]:
    if kind == "text":
        return [str(value)]
    if kind == "code":
        return ["```sh", str(value).rstrip("\n"), "```"]
    if kind == "figure":
        png, svg = (
            value.png.relative_to(out_dir).as_posix(),
            value.svg.relative_to(out_dir).as_posix(),
        )
        return [f"![{value.title}]({png})", "", f"[{value.title} (SVG)]({svg})"]
    return _table(value)


def _table(rows: list[dict]) -> list[str]:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(_cell(row.get(k)) for k in keys) + " |" for row in rows]
    return out


def _cell(value) -> str:
    return cell_text(value).replace("|", "\\|").replace("\n", " ")
