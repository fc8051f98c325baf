"""Where a sweep runs: backend, rank count, topology, the results header and the notes shown
with the results. Kept apart from planning so the plan stays a pure function of the grid.
"""

from __future__ import annotations

import logging

from ncclprobe import provenance
from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.sweep.plan import SweepSpec

log = logging.getLogger("ncclprobe.sweep")

GRAPH_ON_CPU = (
    "graph mode skipped: CUDA graphs need a GPU; on the gloo backend only eager is measured"
)
GLOO_NOTE = (
    "backend gloo: NCCL settings shape the grid and the worker pools but do not affect gloo's numbers; "
    "no best configuration or speedup is shown, differences between configurations are noise"
)
SHARED_GPU_NOTE = (
    "--share-gpu (diagnostic mode): {n} ranks share GPU 0, each with its own NCCL_HOSTID, so NCCL "
    "connects them over NET/Socket as if on different hosts; times and bandwidths say nothing about "
    "NVLink or PCIe, but the settings, NCCL's proof of them and the correctness checks are real "
    "(P2P and SHM settings cannot act here and are refused); no best configuration or speedup is shown"
)
ONE_RANK_NOTE = (
    "one rank: NCCL moves no data between GPUs, so protocol and algorithm choices need two or "
    "more GPUs; eager vs graph overhead is still real"
)


def gpu_count() -> int:
    if not provenance.gpu_device_visible():
        return 0  # known without importing torch: a usage error answers at once
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_backend(backend: str) -> str:
    if backend != "auto":
        return backend
    return "nccl" if gpu_count() > 0 else "gloo"


def check_ranks(backend: str, nranks: int, share_gpu: bool = False) -> None:
    gpus = gpu_count()
    if share_gpu:
        if gpus == 0:
            raise UsageProblem("--share-gpu needs a CUDA GPU; none is visible here")
        if backend != "nccl":
            raise UsageProblem(f"--share-gpu needs the NCCL backend; --backend {backend} was given")
        return
    if backend == "nccl" and gpus == 0:
        raise UsageProblem(
            "--backend nccl needs CUDA GPUs; none is visible here (use --backend gloo on CPU)"
        )
    if backend == "nccl" and nranks > gpus:
        raise UsageProblem(
            f"--nranks {nranks} is more than the {gpus} GPU(s) here; NCCL needs one GPU per rank"
        )


def topology(spec: SweepSpec | None = None) -> tuple[dict | None, list[list[str]] | None]:
    """(header topology, equivalent P2P level groups); (None, None) without GPUs. With `spec`, the
    header also holds what NCCL's LL128 and NVLS rules need about the GPUs it runs on (`node`)."""
    gpus = gpu_count()
    if gpus == 0:
        return None, None
    try:
        from ncclprobe.evidence.live.topo_live import read_live_topology
    except ImportError:
        return {"nvlink": None, "gpu_count": gpus, "source": None}, None
    try:
        topo = read_live_topology()
    except Exception as exc:  # nvidia-smi missing or unreadable: measure every level
        log.warning("cannot read the GPU topology (%s); every P2P level is measured", exc)
        return {"nvlink": None, "gpu_count": gpus, "source": None, "node": _node(spec, None)}, None
    head, levels = describe_topology(topo)
    return {**head, "node": _node(spec, topo)}, levels


def _node(spec: SweepSpec | None, topo) -> dict | None:
    if spec is None:
        return None
    if topo is None:
        return NodeFacts(over_network=spec.share_gpu).to_json()
    from ncclprobe.evidence.live.topo_live import live_node_facts

    facts = live_node_facts(
        gpus=1 if spec.share_gpu else spec.nranks, over_network=spec.share_gpu, topology=topo
    )
    return facts.to_json() if facts else None


def node_facts(spec: SweepSpec, head: dict | None) -> NodeFacts | None:
    """What the header says about the GPUs, for the lint; on gloo NCCL's links concern nothing."""
    if spec.backend != "nccl":
        return None
    if head is None or head.get("node") is None:
        return NodeFacts(over_network=True) if spec.share_gpu else None
    return NodeFacts.from_json(head["node"])


def describe_topology(topo) -> tuple[dict, list[list[str]] | None]:
    """(header topology, equivalent P2P level groups or None when a link is unknown)."""
    summary = topo.summary
    head = {
        "nvlink": summary.get("nvlink"),
        "gpu_count": summary.get("gpu_count"),
        "worst_path": summary.get("worst_path"),
        "source": getattr(topo, "source", None),
    }
    unknown = any(
        link is None for i, row in enumerate(topo.gpu_links) for j, link in enumerate(row) if i != j
    )
    if unknown:  # a level's pair set is only complete when every link is known: measure them all
        log.warning("some GPU links are unknown; every P2P level is measured")
        return head, None
    from ncclprobe.evidence.node.topo import equivalent_levels

    return head, equivalent_levels(topo)


def notes(spec: SweepSpec, skipped_modes: dict[str, str]) -> list[str]:
    out = list(skipped_modes.values())
    if spec.share_gpu:
        out.append(SHARED_GPU_NOTE.format(n=spec.nranks))
    elif spec.backend == "gloo":
        out.append(GLOO_NOTE)
    elif spec.nranks == 1:
        out.append(ONE_RANK_NOTE)
    return out + measurement_notes(spec)


def measurement_notes(spec: SweepSpec) -> list[str]:
    """What the records cannot say by themselves: cases not measured, how the path differs from
    nccl-tests, the buffer policy (docs/METRICS.md "Agreement with nccl-tests")."""
    from ncclprobe.probes.collectives import COLLECTIVES
    from ncclprobe.probes.sweep_comm import GLOO_AGG_NOTE
    from ncclprobe.sweep.plan import plan_cases

    out = [f"not measured: {line}" for line in plan_cases(spec)[1]]
    if spec.path == "torch" and False in spec.in_place:
        out += [
            f"{name}: {COLLECTIVES[name].torch_note}; --path nccl makes NCCL's own call"
            for name in spec.collectives
            if COLLECTIVES[name].torch_note
        ]
    if spec.path == "torch" and spec.backend == "nccl":
        out.append(TORCH_PATH_NOTE)
    if spec.buffers == "reuse":
        out.append(REUSE_NOTE)
    if spec.agg > 1 and spec.backend != "nccl":
        out.append(GLOO_AGG_NOTE)
    if not spec.check:
        out.append(
            "--check 0: no correctness pass; `wrong` is null (unchecked) and LL128 stays refused"
        )
    return out


TORCH_PATH_NOTE = (
    "path torch.distributed: small eager calls are host-bound: torch's dispatch plus the sweep's own "
    "per-iteration events (each eager row's cost_split measures both; docs/METRICS.md); --path nccl "
    "makes NCCL's own calls as nccl-tests does, and --no-iter-events drops the events"
)
REUSE_NOTE = (
    "--buffers reuse: every iteration reuses one buffer, so a message that fits in the GPU's L2 cache is "
    "timed from it (nccl-tests rotates through a largest-message buffer: the default)"
)


def lint_findings(
    configs,
    backend: str,
    node: NodeFacts | None,
    nccl_version: str | None = None,
    collectives=None,
) -> list[dict]:
    """The knowledge table's lint over every configuration, with the GPUs' facts and the NCCL
    version in use, before anything runs: one entry per distinct error or warning with the
    configurations it concerns. They are not refused (forced LL128 is worth measuring: the
    correctness pass shows what it does) but said loudly."""
    from ncclprobe.nccl.lint import lint_env
    from ncclprobe.nccl.safety import TOPOLOGY_CODES

    found: dict[tuple, dict] = {}
    for config in configs:
        for finding in lint_env(
            config.settings, node=node, nccl_version=nccl_version, collectives=collectives
        ):
            if finding.severity == "info" or (backend != "nccl" and finding.code in TOPOLOGY_CODES):
                continue
            entry = found.setdefault(
                (finding.severity, finding.message), {**finding.to_json(), "config_ids": []}
            )
            entry["config_ids"].append(config.config_id)
    return list(found.values())


def known_bad_notes(nccl_version: str | None, node: NodeFacts | None) -> list[str]:
    """The NCCL release the sweep runs, against the known-bad table with this machine's GPUs and
    host (`nccl.known_bad`): said before anything runs, as the lint is."""
    import platform

    from ncclprobe.nccl.known_bad import describe, matching

    caps = node.compute_capabilities if node is not None else None
    return [
        f"known-bad {m.severity}: {describe(m)}"
        for m in matching(nccl_version, caps, host_arch=platform.machine())
    ]


def lint_note(entry: dict) -> str:
    ids = entry["config_ids"]
    where = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    return f"lint {entry['severity']}: {entry['message']}; fix: {entry['fix']} (in {where})"


def usable_modes(modes: tuple[str, ...], backend: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """Graph mode needs CUDA: on gloo it is dropped with its reason, never faked."""
    if backend == "nccl" or "graph" not in modes:
        return modes, {}
    kept = tuple(m for m in modes if m != "graph")
    if not kept:
        raise UsageProblem(
            "--mode graph needs CUDA GPUs (the NCCL backend); this run uses gloo on CPU"
        )
    return kept, {"graph": GRAPH_ON_CPU}


def header(
    spec: SweepSpec, argv: list[str], topo: dict | None, notes_: list[str], skipped_modes: dict
) -> dict:
    return {
        "kind": "sweep",
        **provenance.collect(argv),
        "backend": spec.backend,
        "nranks": spec.nranks,
        "share_gpu": spec.share_gpu,
        "topology": topo,
        "spec": spec.to_json(),
        "skipped_modes": skipped_modes,
        "notes": notes_,
    }
