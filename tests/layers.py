"""Who imports whom, from the real imports: the layer table of docs/DESIGN.md.

Every `import`/`from ... import` of an ncclprobe module in ncclprobe/, engine/ and probes/ counts,
module level and inside functions alike (a lazy import is still a dependency). Units are the
packages (and the top-level modules grouped as "core"); each has a layer, and an import of a
unit in a higher layer is named in the table as the exception it is.

  python -m tests.layers            # print the table
  python -m tests.layers --write    # rewrite it in docs/DESIGN.md (tests/test_one_home.py checks it)
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "DESIGN.md"
BEGIN, END = "<!-- layers:begin (python -m tests.layers --write) -->", "<!-- layers:end -->"
CORE = (
    "errors",
    "numbers",
    "validate",
    "safe_output",
    "secrets",
    "sizes",
    "textenum",
    "verdict",
    "tempdirs",
    "interrupts",
    "provenance",
    "records",
    "stats",
    "findings",
    "cudagraph",
    "__init__",
    "__version__",
)
LAYERS = {  # unit -> (layer, what it is)
    "core": (
        0,
        "errors, strict numbers, readers' validation, safe writing, secret masking, sizes, the "
        "result-record format, verdicts, owned temporary directories, provenance, the CUDA-graph idiom",
    ),
    "nccl": (1, "the NCCL knowledge table, its lint, the recipes"),
    "launch": (1, "worker pools (`launch.py`, `worker.py`)"),
    "evidence": (
        2,
        "readers of the evidence: engine runs (`evidence.run`), topology, NCCL logs, nccl-tests output; "
        "`import`'s recognisers",
    ),
    "pcie": (2, "P2P matrices, platform checks, NCCL's XML dumps, collect-env"),
    "envcheck": (2, "process-tree walk, environments, expectations"),
    "engine": (2, "the tensor-parallel speculative engine (`engine/`)"),
    "probes": (2, "measurements inside workers (`probes/`): collectives, sweep worker, probes"),
    "sweep": (3, "the sweep: spec builder and defaults, plan, run, proof, tables, torchrun"),
    "recommend": (4, "measurements to settings"),
    "diagnose": (4, "ranked causes from the engine-run view"),
    "report": (4, "figures and the Markdown/HTML report"),
    "export": (4, "results out: nccl-tests tables, optimize_config.py CSV"),
    "importing": (
        4,
        "`ncclprobe import`: the table of recognisers over the readers and P2P analysis",
    ),
    "engine_session": (5, "run-engine as one library call: guard, runs, --tuned's quick sweep"),
    "cli": (6, "one thin module per command; verdicts to exit codes"),
}


def unit_of(module: str) -> str | None:
    """`ncclprobe.sweep.run` -> "sweep"; top-level modules -> "core", "launch", "export", ..."""
    parts = module.split(".")
    if parts[0] != "ncclprobe":
        return None
    if len(parts) == 1:
        return "core"
    name = parts[1]
    if name in ("launch", "worker"):
        return "launch"
    if name == "__main__":
        return "cli"
    return "core" if name in CORE else name


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in ("engine", "probes"):
        parts = ["ncclprobe", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """unit -> the other units it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    for folder in ("ncclprobe", "engine", "probes"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = unit_of(_module(path))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = _imported(node)
                for name in names:
                    target = unit_of(name)
                    if target and target != source:
                        edges[source].add(target)
    return edges


def _imported(node) -> list[str]:
    """The modules an import statement names (`from ncclprobe import tempdirs` names ncclprobe.tempdirs)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return (
            [f"{node.module}.{a.name}" for a in node.names]
            if node.module == "ncclprobe"
            else [node.module]
        )
    return []


def table() -> str:
    edges = imports()
    unknown = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    unknown = [u for u in unknown if u not in LAYERS]
    if unknown:
        raise SystemExit(f"units without a layer in tests/layers.py: {', '.join(unknown)}")
    lines = [
        "| layer | unit | what | imports | imports upward (exceptions) |",
        "|---|---|---|---|---|",
    ]
    for unit, (layer, what) in sorted(LAYERS.items(), key=lambda kv: (kv[1][0], kv[0])):
        down = sorted(t for t in edges.get(unit, ()) if LAYERS[t][0] <= layer)
        up = sorted(t for t in edges.get(unit, ()) if LAYERS[t][0] > layer)
        lines.append(
            f"| {layer} | `{unit}` | {what} | {', '.join(down) or '-'} | {', '.join(up) or '-'} |"
        )
    return "\n".join(lines)


def design_table() -> str:
    text = DESIGN.read_text(encoding="utf-8")
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()


def write() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DESIGN.write_text(text[:start] + "\n" + table() + "\n" + text[end:], encoding="utf-8")


if __name__ == "__main__":
    write() if "--write" in sys.argv[1:] else print(table())
