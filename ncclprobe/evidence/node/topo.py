"""Read `nvidia-smi topo -m` output, and derive what NCCL_P2P_LEVEL would do on that topology.

Every format seen in the wild parses (tests/fixtures/topo): old (no NUMA column), mid (NUMA
Affinity), new (GPU NUMA ID, NIC legend), tab- or space-separated, NIC rows (`mlx5_N`, `NICn`),
`-mp` output, ANSI escapes, a missing or truncated legend, prompt or prose lines before the
matrix, and a second block (`topo -p2p p`) after it.

The sweep's use: `p2p_level_pairs` says, for each NCCL_P2P_LEVEL value, which GPU pairs NCCL
would connect peer-to-peer. NCCL allows P2P when the pair's path type is at most the level
(`path->type <= p2pLevel` in ncclTopoCheckP2p, src/graph/paths.cc). nvidia-smi's codes map onto
NCCL's path types in the same order (LOC < NVL < NVB < PIX < PXB < PHB < SYS); nvidia-smi's NODE
(host bridges within one NUMA node) is PHB to NCCL, whose topology has no NODE type. Levels that
give the same pairs are equivalent: the sweep measures one and says why it skipped the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.text import clean_line, read_text_file
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.p2p import P2P_LEVELS, PATH_TYPES
from ncclprobe.numbers import ascii_re
from ncclprobe.verdict import Verdict

_SMI_TO_NCCL = {
    "X": "LOC",
    "PIX": "PIX",
    "PXB": "PXB",
    "PHB": "PHB",
    "NODE": "PHB",
    "SYS": "SYS",
    "SOC": "SYS",
}
# nvidia-smi's codes from nearest to furthest, for "worst path"
_SMI_ORDER = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_LINK_CODE = ascii_re(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_P2P_STATUS = ascii_re(r"^(X|OK|CNS|GNS|TNS|NS|U)$")
_DEVICE = ascii_re(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z][a-z0-9_]*\d)$")
_ATTRIBUTES = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))
_NIC_LEGEND = ascii_re(r"^\s*(NIC\d+):\s*(\S+)\s*$")


@dataclass
class GpuInfo:
    index: int
    cpu_affinity: str | None = None
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "cpu_affinity": self.cpu_affinity,
            "numa_affinity": self.numa_affinity,
            "gpu_numa_id": self.gpu_numa_id,
        }


@dataclass
class Topology:
    """GPUs, the GPU x GPU matrix of nvidia-smi codes (None where unknown), NICs and notes."""

    gpus: list[GpuInfo]
    gpu_links: list[list[str | None]]
    nics: list[str] = field(default_factory=list)  # names as printed: NIC0, mlx5_0
    nic_devices: dict[str, str] = field(
        default_factory=dict
    )  # NIC0 -> mlx5_0 (from the NIC legend)
    nic_links: dict[str, list[str]] = field(default_factory=dict)  # NIC -> code to each GPU
    p2p_status: list[list[str]] | None = None  # `topo -p2p` block: OK / NS / ...
    source: str = "text"
    sources: dict[str, str] = field(default_factory=dict)  # live reading: what each source gave
    p2p_check: dict | None = None  # the real P2P data check, when run
    peer_access: list[list[bool]] | None = None  # torch.cuda.can_device_access_peer
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict:
        codes = [
            self.gpu_links[i][j]
            for i in range(len(self.gpus))
            for j in range(len(self.gpus))
            if i != j
        ]
        known = [c for c in codes if c]
        numa = sorted({g.numa_affinity for g in self.gpus if g.numa_affinity})
        return {
            "gpu_count": len(self.gpus),
            "nvlink": any(c.startswith("NV") for c in known) if known or not codes else None,
            "links": node_facts(self).links,
            "worst_path": max(known, key=_smi_rank) if known else None,
            "numa_nodes": numa,
            "numa_spread": len(numa) if numa else None,
            "nic_count": len(self.nics),
        }

    def verdict(self) -> Verdict:
        """FINDINGS when the live P2P data check saw wrong data, hung or failed."""
        status = (self.p2p_check or {}).get("status")
        return Verdict.of(status in ("corrupt", "hang", "error"))

    def to_json(self) -> dict:
        levels = p2p_level_pairs(self)
        return {
            "schema_version": 1,
            "source": self.source,
            "gpus": [g.to_json() for g in self.gpus],
            "gpu_links": self.gpu_links,
            "nics": list(self.nics),
            "nic_devices": dict(self.nic_devices),
            "nic_links": dict(self.nic_links),
            "p2p_status": self.p2p_status,
            "summary": self.summary,
            "p2p_levels": {
                level: sorted(list(p) for p in pairs) for level, pairs in levels.items()
            },
            "equivalent_levels": equivalent_levels(self),
            "sources": dict(self.sources),
            "peer_access": self.peer_access,
            "p2p_check": self.p2p_check,
            "notes": list(self.notes),
        }


def _smi_rank(code: str) -> int:
    return _SMI_ORDER.index("NV" if code.startswith("NV") else ("SYS" if code == "SOC" else code))


def load_topo(path: str | Path) -> Topology:
    """The one loader of a saved `nvidia-smi topo -m` (topo --from, knobs --lint --topo)."""
    return parse_topo(read_text_file(path, "topology file"))


def parse_topo(text: str) -> Topology:
    """Parse `nvidia-smi topo -m` text; UsageProblem when no GPU matrix is found or it is cut short."""
    lines = [clean_line(line) for line in text.splitlines()]
    start = _find_header(lines, 0)
    if start is None:
        raise UsageProblem(
            "no nvidia-smi topology matrix found: expected a header line that starts with GPU0"
        )
    topo, end = _parse_block(lines, start)
    topo.nic_devices = _nic_legend(lines[end:])
    second = _find_header(lines, end)
    if second is not None:
        topo.p2p_status = _p2p_block(lines, second, len(topo.gpus))
    return topo


def _find_header(lines: list[str], start: int) -> int | None:
    for number in range(start, len(lines)):
        tokens = lines[number].split()
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or not _LINK_CODE.match(tokens[1])):
            return number
    return None


def _header_columns(line: str) -> tuple[list[str], list[str]]:
    """Device column names and the attribute columns (CPU Affinity, NUMA Affinity, GPU NUMA ID)."""
    tokens = line.split()
    devices, rest = [], tokens
    while rest and _DEVICE.match(rest[0]) and rest[:2] != ["GPU", "NUMA"]:
        devices.append(rest[0])
        rest = rest[1:]
    attributes = []
    for words in _ATTRIBUTES:
        if tuple(rest[: len(words)]) == words:
            attributes.append("_".join(w.lower() for w in words))
            rest = rest[len(words) :]
    return devices, attributes


def _parse_block(lines: list[str], start: int) -> tuple[Topology, int]:
    devices, attributes = _header_columns(lines[start])
    gpu_names = [d for d in devices if d.startswith("GPU")]
    rows: dict[str, list[str]] = {}
    gpus: dict[str, GpuInfo] = {}
    number = start + 1
    for number in range(start + 1, len(lines)):
        tokens = lines[number].split()
        if not tokens or tokens[0] not in devices or tokens[0] in rows:
            break
        cells = tokens[1 : 1 + len(devices)]
        if len(cells) < len(devices) or not all(_LINK_CODE.match(c) for c in cells):
            break
        rows[tokens[0]] = cells
        if tokens[0].startswith("GPU"):
            values = [None if v == "N/A" else v for v in tokens[1 + len(devices) :]]
            gpus[tokens[0]] = GpuInfo(int(tokens[0][3:]), **dict(zip(attributes, values)))
    else:
        number = len(lines)
    missing = [g for g in gpu_names if g not in gpus]
    if missing:
        raise UsageProblem(
            f"topology matrix is cut short: the header names {len(gpu_names)} GPUs "
            f"but rows for {', '.join(missing)} are missing or malformed"
        )
    return _assemble(devices, gpu_names, rows, gpus), number


def _assemble(
    devices: list[str], gpu_names: list[str], rows: dict[str, list[str]], gpus: dict[str, GpuInfo]
) -> Topology:
    gpu_columns = [devices.index(g) for g in gpu_names]
    nics = [d for d in devices if not d.startswith("GPU")]
    topo = Topology(
        gpus=[gpus[g] for g in gpu_names],
        gpu_links=[[rows[g][c] for c in gpu_columns] for g in gpu_names],
        nics=nics,
        nic_links={n: [rows[n][c] for c in gpu_columns] for n in nics if n in rows},
    )
    topo.notes += _symmetry_notes(topo.gpu_links)
    cut = [n for n in nics if n not in rows]
    if cut:
        topo.notes.append(f"rows missing for {', '.join(cut)} (output cut short?)")
    return topo


def _symmetry_notes(links: list[list[str | None]]) -> list[str]:
    return [
        f"matrix is not symmetric at GPU{i}/GPU{j}: {links[i][j]} vs {links[j][i]}"
        for i in range(len(links))
        for j in range(i + 1, len(links))
        if links[i][j] != links[j][i]
    ]


def _nic_legend(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        match = _NIC_LEGEND.match(line)
        if match:
            found[match[1]] = match[2]
    return found


def _p2p_block(lines: list[str], start: int, ngpus: int) -> list[list[str]] | None:
    """A following `nvidia-smi topo -p2p` block (OK, NS, CNS, ...), when it matches the GPU count."""
    matrix = []
    for line in lines[start + 1 : start + 1 + ngpus]:
        tokens = line.split()
        if len(tokens) != ngpus + 1 or not all(_P2P_STATUS.match(t) for t in tokens[1:]):
            return None
        matrix.append(tokens[1:])
    return matrix if len(matrix) == ngpus else None


def parse_p2p_status(text: str) -> list[list[str]] | None:
    """A standalone `nvidia-smi topo -p2p r|w|n|a|p` block (OK, NS, CNS, GNS, TNS, U); None when absent."""
    lines = [clean_line(line) for line in text.splitlines()]
    start = _find_header(lines, 0)
    if start is None:
        return None
    gpus = [t for t in lines[start].split() if t.startswith("GPU")]
    return _p2p_block(lines, start, len(gpus))


def nccl_path_types(topology: Topology) -> list[list[str | None]]:
    """The NCCL path type between each GPU pair: NV# -> NVL; PCIe codes mapped; NVB where two GPUs
    are not linked directly but share an NVLink neighbour (NCCL routes P2P through it)."""
    links = topology.gpu_links
    n = len(links)
    types = [[_nccl_type(links[i][j]) for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(n):
            if types[i][j] not in (None, "LOC", "NVL") and any(
                types[i][k] == "NVL" and types[k][j] == "NVL" for k in range(n)
            ):
                types[i][j] = "NVB"
    return types


def _nccl_type(code: str | None) -> str | None:
    if code is None:
        return None
    return "NVL" if code.startswith("NV") else _SMI_TO_NCCL.get(code)


def node_facts(
    topology: Topology,
    *,
    gpus: Iterable[int] | None = None,
    compute_capabilities: Sequence[int] | None = None,
    over_network: bool = False,
) -> NodeFacts:
    """What NCCL's topology rules (LL128, NVLS) need to know about `gpus` (default all) of this topology."""
    return NodeFacts.from_path_types(
        nccl_path_types(topology),
        gpus=gpus,
        compute_capabilities=compute_capabilities,
        over_network=over_network,
    )


def p2p_level_pairs(topology: Topology) -> dict[str, frozenset[tuple[int, int]]]:
    """For each documented NCCL_P2P_LEVEL, the GPU pairs (i < j) NCCL would connect peer-to-peer.

    Pairs whose link is unknown (a live reading without nvidia-smi or NVML) are in no set."""
    types = nccl_path_types(topology)
    n = len(types)
    out = {}
    for level in P2P_LEVELS:
        limit = PATH_TYPES.index(level)
        out[level] = frozenset(
            (i, j)
            for i in range(n)
            for j in range(i + 1, n)
            if types[i][j] is not None and PATH_TYPES.index(types[i][j]) <= limit
        )
    return out


def equivalent_levels(topology: Topology) -> list[list[str]]:
    """Groups of P2P levels with the same pair set, in level order: measure one level per group."""
    groups: dict[frozenset, list[str]] = {}
    for level, pairs in p2p_level_pairs(topology).items():
        groups.setdefault(pairs, []).append(level)
    return list(groups.values())
