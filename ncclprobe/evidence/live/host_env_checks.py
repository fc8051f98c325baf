"""The env-check documents several hosts left in a shared directory, read back as one piece of
evidence: which processes of the job each host has, and what each one's environment holds.

On every node an agent (`python -m ncclprobe.diagnose.process_env.node_agent`) finds the job's processes
(`job_processes`), checks each tree as `env-check --pid` does, and writes one node document,
`<dir>/env-check/<host>.json`:

  {"kind": "env-check-node", "schema_version": 1, "host": "gpu017", "selector": {...},
   "roots": [4242], "documents": [<env-check document, schema 1>, ...], "problem": null | "..."}

`documents` holds one env-check document per root (the topmost processes of the job there);
`problem` says why there is none (no process of the job on that host). This module is the format's
one home: the agent builds its document with `node_document` and `node_path`, and the merge reads
every one with `read_host_checks`, each inner document through env-check's own loader
(`env_check_document`), environments masked as read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live.env_check_document import EnvCheckDocument, check_document
from ncclprobe.secrets import mask_text
from ncclprobe.validate import Where, load_json

KIND = "env-check-node"
SCHEMA_VERSION = 1
FOLDER = "env-check"
MAX_FILES = 65536


def node_path(directory: str | Path, host: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in host) or "host"
    return Path(directory) / FOLDER / f"{safe}.json"


def node_document(
    host: str,
    selector: dict,
    roots: list[int],
    documents: list[dict],
    problem: str | None,
    aliases: Sequence[str] = (),
) -> dict:
    return {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "host": host,
        "aliases": list(aliases),
        "selector": selector,
        "roots": roots,
        "documents": documents,
        "problem": problem,
    }


@dataclass(frozen=True)
class HostCheck:
    """One host as its agent saw it."""

    host: str
    path: str
    roots: tuple[int, ...] = ()
    documents: tuple[EnvCheckDocument, ...] = ()
    problem: str | None = None  # why no document: no process of the job there
    aliases: tuple[str, ...] = ()  # the other names and addresses the host answers to


@dataclass
class HostsEnvEvidence:
    """Every host's check, the hosts that were expected, and what the launch of the agents did."""

    checks: list[HostCheck]
    expected: tuple[str, ...] | int  # the hosts named, or how many nodes srun reached
    launch: dict = field(default_factory=dict)
    selector: dict = field(default_factory=dict)
    launcher: str | None = None

    def missing(self) -> list[str] | int:
        """The expected hosts no document came from (or, for a count, how many are missing)."""
        if isinstance(self.expected, int):
            return max(0, self.expected - len(self.checks))
        seen = {name for check in self.checks for name in (check.host, *check.aliases)}
        return [host for host in self.expected if host not in seen]


def read_host_checks(directory: str | Path) -> list[HostCheck]:
    """Every node document in `<directory>/env-check/`, checked; UsageProblem naming the file and
    field of one that is not a node document."""
    folder = Path(directory) / FOLDER
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if len(paths) > MAX_FILES:
        raise UsageProblem(f"{str(folder)!r} holds more than {MAX_FILES} node documents")
    return [_read(path) for path in paths]


def _read(path: Path) -> HostCheck:
    where = Where(str(path))
    doc = where.object(load_json(path, "env-check node document"))
    if doc.get("kind") != KIND or doc.get("schema_version") != SCHEMA_VERSION:
        raise where.fail(
            f"not an env-check node document of schema {SCHEMA_VERSION} (kind {doc.get('kind')!r}, "
            f"schema {doc.get('schema_version')!r})"
        )
    host = where.field(doc, "host", "str")
    roots = where.list_of(doc, "roots", "int", min=1)
    problem = where.field(doc, "problem", "str", required=False, nullable=True)
    aliases = where.list_of(doc, "aliases", "str", required=False) or []
    documents = []
    for index, inner in enumerate(where.field(doc, "documents", "list")):
        checked = check_document(inner, where.at("documents").at(index))
        documents.append(EnvCheckDocument.from_json(checked))
    return HostCheck(
        host=mask_text(host),
        path=str(path),
        roots=tuple(roots or ()),
        documents=tuple(documents),
        problem=mask_text(problem) if problem else None,
        aliases=tuple(mask_text(alias) for alias in aliases),
    )
