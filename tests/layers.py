"""Who imports whom, from the real imports: the layer table of docs/DESIGN.md.

The layers themselves live in one place, setup.cfg's import contract (`[importlinter:contract:layers]`),
which `lint-imports` holds in CI (.ci/lint-imports): a module imports only its own layer or below,
imports inside functions included. This module only draws the table from them: one row per unit
(a package, or a top-level module; the bottom layer's modules are one row, "core"), what it is,
and which units it imports, counted from every `import` in ncclprobe/, engine/ and probes/.

  python -m tests.layers            # print the table
  python -m tests.layers --write    # rewrite it in docs/DESIGN.md (tests/test_one_home.py checks it)
"""

from __future__ import annotations

import ast
import configparser
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "DESIGN.md"
BEGIN, END = "<!-- layers:begin (python -m tests.layers --write) -->", "<!-- layers:end -->"
GROUPED = {
    "__main__": "cli",
    "worker": "launch",
    "pool_progress": "launch",
}  # modules shown with the unit they serve
WHAT = {
    "core": "errors, strict numbers, the one JSON policy (`strict_json`), readers' validation, safe writing, secret masking and the "
    "environment display policy, the terminal guard (`visible`), sizes, the result-record format, verdicts, owned temporary "
    "directories, provenance, the CUDA-graph idiom, statistics (`stats`), the one Finding type "
    "(`findings`), ncclprobe's own variables (`envvars`), bytes per element (`dtypes`), rank sets as "
    "ranges (`rank_ranges`)",
    "nccl": "the NCCL knowledge table, its lint, the recipes, the names of algorithms, protocols "
    "and collectives (`names`)",
    "engine_facts": "what the engines do, read in their source (`engine_facts/`): vLLM's CUDA-graph modes, "
    "the speculative-decoding log lines and how acceptance aggregates, the profilers capture drives, "
    "speculative configurations that run without working",
    "launch": "worker pools (`launch.py`, `worker.py`, `pool_progress.py`: their watchdog)",
    "hosts": "runs across hosts through srun, torchrun or mpirun: each launcher's command lines, their "
    "run and watchdog, a rank's identity from its launcher's variables, Slurm host lists",
    "evidence": "every reader, by source: engine runs (`run/`), what NCCL wrote (`nccl/`: logs, nccl-tests, "
    "XML dumps), what a hung job left (`hang/`: Flight Recorder dumps, job logs), a node's files (`node/`: "
    "topology, P2P matrices, lspci, collect-env), this machine now (`live/`: topology, sysfs, process "
    "trees and their environments), recommendation files, the diagnose bundle",
    "engine": "the tensor-parallel speculative engine (`engine/`)",
    "probes": "measurements inside workers (`probes/`): collectives, sweep worker, probes",
    "sweep": "the sweep: spec builder and defaults, plan, run, proof, tables, torchrun",
    "gather": "live sources gathered into evidence: the P2P measurement, platform and NCCL dumps "
    "(`p2p`), a job's processes and their NCCL logs (`processes`), the settings to lint (`settings`), "
    "every node's env-check documents through the job's launcher (`hosts`)",
    "recommend": "measurements to settings",
    "diagnose": "rule sets over the evidence, by question: an engine run's time (`run/`), hangs "
    "(`hang/`), settings (`settings/`), P2P health (`p2p/`), process environments (`process_env/`); "
    "the one Report and `judge` (`report`), the one renderer (`render`)",
    "report": "figures and the Markdown/HTML report",
    "export": "results out: nccl-tests tables, optimize_config.py CSV",
    "importing": "`ncclprobe import`: the table of recognisers over the readers, each file's rule set",
    "engine_session": "run-engine as one library call: guard, runs, --tuned's quick sweep",
    "capture": "`ncclprobe capture -- CMD`: the user's own job run with the evidence on (its "
    "environment, the in-job module, the process tree watched, a server's load), then diagnosed",
    "cli": "one thin module per command; verdicts to exit codes",
}


def contract_layers() -> list[list[str]]:
    """The layers of setup.cfg's import contract, bottom first, each a list of module names."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    layers = [[name.strip() for name in line.split(":")] for line in lines if line.strip()]
    return layers[::-1]


def units() -> dict[str, int]:
    """unit -> its layer (0 is the bottom); the bottom layer's modules are the unit "core"."""
    layers = contract_layers()
    out = {"core": 0}
    for number, names in enumerate(layers[1:], 1):
        for name in names:
            out.setdefault(GROUPED.get(name, name), number)
    return out


def unit_of(module: str, layer_of: dict[str, int]) -> str | None:
    """`ncclprobe.sweep.run` -> "sweep"; the bottom layer's modules -> "core" (`layer_of`: `units()`,
    read once by the caller, not once per import statement)."""
    parts = module.split(".")
    if parts[0] != "ncclprobe":
        return None
    name = parts[1] if len(parts) > 1 else "__init__"
    name = GROUPED.get(name, name)
    return name if name in layer_of else "core"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in ("engine", "probes"):
        parts = ["ncclprobe", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """unit -> the other units it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    layer_of = units()
    for folder in ("ncclprobe", "engine", "probes"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = unit_of(_module(path), layer_of)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                for name in _imported(node):
                    target = unit_of(name, layer_of)
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


def table(edges: dict[str, set[str]] | None = None) -> str:
    """The layer table; `edges`: `imports()` when the caller has it already (it parses every file)."""
    layer_of = units()
    missing = sorted(set(layer_of) - set(WHAT))
    if missing:
        raise SystemExit(f"units without a description in tests/layers.py: {', '.join(missing)}")
    edges = imports() if edges is None else edges
    lines = ["| layer | unit | what | imports |", "|---|---|---|---|"]
    for unit, layer in sorted(layer_of.items(), key=lambda kv: (kv[1], kv[0])):
        names = ", ".join(sorted(edges.get(unit, ()))) or "-"
        lines.append(f"| {layer} | `{unit}` | {WHAT[unit]} | {names} |")
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
