"""Reading a recommendation file back (`ncclprobe recommend --emit json --output FILE`).

One loader for every command that takes one: `env-check --expect-from` (its env is expected in
the job) and `run-engine --tuned` (its env is applied). It checks what they use, the kind, the
schema version and `env` (variable names to string values), and names the file and field.
"""

from __future__ import annotations

import re
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.validate import Where, load_json

SCHEMA_VERSION = 1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def load_recommendation_file(path: str | Path, option: str) -> dict:
    """The checked document; `option` (e.g. "--tuned") starts every message."""
    path = Path(path)
    if not path.is_file():
        raise UsageProblem(
            f"{option} {path}: cannot read recommendation file "
            f"({'not a regular file' if path.exists() else 'no such file'})"
        )
    doc = load_json(path, f"{option} recommendation file")
    where = Where(str(path))
    if not isinstance(doc, dict) or doc.get("kind") != "recommendation":
        raise UsageProblem(
            f'{option} {path}: not a recommendation file (kind must be "recommendation"; '
            "write one with `ncclprobe recommend ... --emit json --output FILE`)"
        )
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageProblem(
            f"{option} {path}: schema_version {doc.get('schema_version')!r} is not supported "
            f"(need {SCHEMA_VERSION})"
        )
    env = where.field(doc, "env", "str-map")
    bad = next((name for name in env if not _NAME.fullmatch(name)), None)
    if bad is not None:
        raise where.fail(f'field "env" holds {bad[:40]!r}, which is not a variable name')
    return doc


def recommended_env(path: str | Path, option: str) -> dict[str, str]:
    """The settings a recommendation file asks for."""
    return dict(load_recommendation_file(path, option)["env"])
