"""Render report sections as one self-contained HTML file: figures are embedded as SVG data URIs,
so the file can be mailed or attached without its directory."""

from __future__ import annotations

import base64
import html

from ncclprobe.report.content import Section, cell_text

STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f0f0f0}pre{background:#f6f6f6;padding:0.8em;overflow-x:auto}img{max-width:100%}
figure{margin:1.5em 0}figcaption{color:#555;font-size:0.9em}"""


def render(title: str, sections: list[Section]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    for section in sections:
        body.append(f"<h2>{html.escape(section.heading)}</h2>")
        body += [_block(kind, value) for kind, value in section.blocks]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _block(kind: str, value) -> str:
    if kind == "text":
        return f"<p>{html.escape(str(value))}</p>"
    if kind == "code":
        return f"<pre><code>{html.escape(str(value))}</code></pre>"
    if kind == "figure":
        data = base64.b64encode(value.svg.read_bytes()).decode("ascii")
        return (
            f'<figure><img alt="{html.escape(value.title)}" src="data:image/svg+xml;base64,{data}">'
            f"<figcaption>{html.escape(value.title)}</figcaption></figure>"
        )
    return _table(value)


def _table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row.get(k)))}</td>" for k in keys) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value) -> str:
    return cell_text(value)
