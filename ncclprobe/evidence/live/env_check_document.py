"""Reading an env-check document back: `ncclprobe env-check --format json` output, as diagnose reads it.

One loader for every command that takes such a file. It accepts the one document a single check
prints and the JSON Lines a `--watch` prints (one document per snapshot: the last one counts, as
the newest state of the job), checks the fields readers use, naming file, line and field, and
returns the typed `EnvCheckDocument` (its processes and their expectation checks); the statuses of
an expectation have their one home here (`ExpectationStatus`), for the writer and the readers.
Environments, findings and expected values are masked as read (`ncclprobe.secrets`): a document
written by hand or by another tool may hold what env-check never prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncclprobe.errors import UsageProblem
from ncclprobe.secrets import mask_env, mask_env_value, mask_text
from ncclprobe.textenum import TextEnum
from ncclprobe.validate import JSON_LIMIT, Where, loads_json, read_text

# of the document env-check writes (`diagnose.process_env.report`) and this loader reads
SCHEMA_VERSION = 1
KIND = "env-check"
_OPT = {"required": False, "nullable": True}


class ExpectationStatus(TextEnum):
    """An expectation (`--expect NAME=VALUE`) against what one process has."""

    OK = "ok"
    MISSING = "missing"
    DIFFERENT = "different"
    UNKNOWN = "unknown"  # the /proc environment block was empty: it says nothing


@dataclass(frozen=True)
class CheckedExpectation:
    variable: str
    status: ExpectationStatus | str  # a newer writer's status stays as written


@dataclass(frozen=True)
class CheckedProcess:
    """One process of the job as env-check saw it."""

    pid: int
    ppid: int | None = None
    role: str | None = None
    readable: bool = False
    env: dict[str, str] | None = None  # None: not readable (an empty dict: read, and empty)
    checks: tuple[CheckedExpectation, ...] = ()
    forked_from: object = None
    nccl_version: str | None = None  # what its NCCL log said (`env-check --log`)

    @property
    def empty_block(self) -> bool:
        """An empty /proc environment block says nothing about what the process holds (env-check
        marks its expectations unknown)."""
        return any(c.status == ExpectationStatus.UNKNOWN for c in self.checks)

    @classmethod
    def from_json(cls, proc: dict) -> CheckedProcess:
        checks = tuple(
            CheckedExpectation(str(c.get("variable")), _status(c.get("status")))
            for c in proc.get("checks") or []
            if isinstance(c, dict)
        )
        return cls(
            pid=int(proc["pid"]),  # check_document: a whole number
            ppid=proc.get("ppid"),
            role=proc.get("role"),
            readable=bool(proc.get("readable")),
            env=mask_env(proc["env"]) if isinstance(proc.get("env"), dict) else proc.get("env"),
            checks=checks,
            forked_from=proc.get("forked_from"),
            nccl_version=(proc.get("nccl_log") or {}).get("nccl_version"),
        )


@dataclass(frozen=True)
class EnvCheckDocument:
    """What diagnose reads of an env-check document."""

    root_pid: int | None
    processes: tuple[CheckedProcess, ...] = ()
    checked_pids: frozenset[int] = frozenset()
    findings: tuple[str, ...] = ()  # env-check's own finding lines
    kind: str = KIND
    expectations: tuple[
        dict, ...
    ] = ()  # what env-check was asked to expect, as its JSON lists them

    @classmethod
    def from_json(cls, doc: dict) -> EnvCheckDocument:
        """From a document in memory (the loader checks a file's first; tests hand over output)."""
        verdict = doc.get("verdict") or {}
        return cls(
            root_pid=doc.get("root_pid"),
            processes=tuple(
                CheckedProcess.from_json(p)
                for p in doc.get("processes") or []
                if isinstance(p, dict)
            ),
            checked_pids=frozenset(verdict.get("checked_pids") or []),
            findings=tuple(mask_text(str(f)) for f in verdict.get("findings") or []),
            kind=KIND,  # check_document: it is one
            expectations=tuple(_masked_expectation(e) for e in doc.get("expectations") or ()),
        )


def _masked_expectation(entry: Any) -> Any:
    """An expectation as another writer may have recorded it: its value under the env policy."""
    if not isinstance(entry, dict) or not isinstance(entry.get("value"), str):
        return entry
    return {**entry, "value": mask_env_value(str(entry.get("variable")), entry["value"])}


def _status(value: Any) -> ExpectationStatus | str:
    return ExpectationStatus(value) if value in ExpectationStatus.values() else value


def load_document(path: str | Path) -> EnvCheckDocument:
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
        doc = check_document(loads_json(line, f"{label} line {number}"), Where(str(path), number))
    else:
        doc = check_document(loads_json(text, label), Where(str(path)))
    return EnvCheckDocument.from_json(doc)


def check_document(doc: object, where: Where) -> dict:
    doc = where.object(doc, "an env-check document (a JSON object)")
    if doc.get("kind") != KIND:
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
