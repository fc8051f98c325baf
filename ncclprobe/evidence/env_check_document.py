"""Reading an env-check document back: `ncclprobe env-check --format json` output, as diagnose reads it.

One loader for every command that takes such a file. It accepts the one document a single check
prints and the JSON Lines a `--watch` prints (one document per snapshot: the last one counts, as
the newest state of the job), and checks the fields readers use, naming file, line and field.
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.validate import JSON_LIMIT, Where, loads_json, read_text

SCHEMA_VERSION = 1  # of the document env-check writes (`envcheck.report`) and this loader reads
_OPT = {"required": False, "nullable": True}


def load_document(path: str | Path) -> dict:
    """The (last) env-check document in `path`, checked; a UsageProblem naming what is wrong."""
    text = read_text(path, "env-check document", limit=JSON_LIMIT, errors="strict")
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise UsageProblem(f"env-check document {str(path)!r} is empty")
    label = f"env-check document {str(path)!r}"
    if (
        len(lines) > 1
        and lines[0][1].lstrip().startswith("{")
        and lines[0][1].rstrip().endswith("}")
    ):
        number, line = lines[-1]  # --watch --format json: one document per line
        return check_document(loads_json(line, f"{label} line {number}"), Where(str(path), number))
    return check_document(loads_json(text, label), Where(str(path)))


def check_document(doc, where: Where) -> dict:
    where.object(doc, "an env-check document (a JSON object)")
    if doc.get("kind") != "env-check":
        raise where.fail(
            f'not an env-check document (its "kind" is {doc.get("kind")!r}; write one with '
            "`ncclprobe env-check --pid PID --format json`)"
        )
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise where.fail(
            f"schema version {doc.get('schema_version')!r}; this ncclprobe reads {SCHEMA_VERSION}"
        )
    where.field(doc, "root_pid", "int", min=1)
    for index, proc in enumerate(where.field(doc, "processes", "list")):
        place = where.at("processes").at(index)
        place.object(proc, "a process (a JSON object)")
        place.field(proc, "pid", "int", min=1)
        place.field(proc, "env", "str-map", **_OPT)
        place.field(proc, "libnccl", "str", **_OPT)
        place.field(proc, "checks", "list", **_OPT)
    verdict = where.field(doc, "verdict", "dict")
    place = where.at("verdict")
    place.field(verdict, "exit_code", "int", **_OPT)
    place.list_of(verdict, "findings", "str", required=False)
    place.list_of(verdict, "checked_pids", "int", required=False, min=1)
    return doc
