"""Read NCCL's topology dump (NCCL_TOPO_DUMP_FILE) and graph dump (NCCL_GRAPH_DUMP_FILE), and say where
NCCL's model disagrees with the measured matrices.

Topology (`<system version="1">`, src/graph/xml.cc): `cpu` nodes (numaid, arch, vendor) hold nested
`pci` nodes (busid, class, link_speed, link_width), GPUs as `<gpu dev sm rank gdr>` inside their
`pci` node, with `<nvlink target count tclass>` and `<c2c>` children, NICs as `<nic><net .../></nic>`.
NCCL's PCIe bandwidth for a link is width x per-lane rate / 80 GB/s with the rate from
`kvDictPciGen` (src/graph/topo.cc: 2.5 GT/s -> 15 ... 64 GT/s -> 480, unknown -> 60, i.e. Gen3), so a
VM that reports no link speed is modelled as Gen3. Graphs (`<graphs version="1">`, ncclTopoGetXmlFromGraph
in src/graph/search.cc): one `<graph id pattern nchannels speedintra speedinter typeintra typeinter>`
per algorithm with one `<channel>` of `<gpu dev>` (and `<net dev>`) per channel; pattern 4 is a ring,
1-3 trees, 5 NVLS, 6 CollNet direct (src/include/graph.h). speedintra is GB/s per channel.

Safety: these files may come from anyone. The stdlib parser (expat) does not fetch external entities,
and expat 2.4+ limits entity amplification, but NCCL never writes a DOCTYPE or an entity, so any
`<!DOCTYPE` or `<!ENTITY` is refused before parsing, and input over 16 MiB is refused: no entity is
ever expanded. That keeps the dependency list short (no defusedxml) without trusting expat's limits.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import is_digits

MAX_BYTES = 16 << 20
PCI_GEN_RATE = {
    "2.5 GT/s": 15,
    "5 GT/s": 30,
    "8 GT/s": 60,
    "16 GT/s": 120,
    "32 GT/s": 240,
    "2.5 GT/s PCIe": 15,
    "5.0 GT/s PCIe": 30,
    "8.0 GT/s PCIe": 60,
    "16.0 GT/s PCIe": 120,
    "32.0 GT/s PCIe": 240,
    "64.0 GT/s PCIe": 480,
}
PCI_FALLBACK_RATE = 60
PATTERNS = {
    1: "balanced tree",
    2: "split tree",
    3: "tree",
    4: "ring",
    5: "nvls",
    6: "collnet direct",
}
COLLNET_CHAIN_ID = (
    2  # NCCL's init.cc: collNetChainGraph->id = 2, pattern NCCL_TOPO_PATTERN_TREE (every version)
)


def parse_xml(text: str, what: str) -> ET.Element:
    if len(text.encode("utf-8", errors="replace")) > MAX_BYTES:
        raise UsageProblem(f"{what} is over {MAX_BYTES >> 20} MiB: not an NCCL dump")
    if re.search(r"<!\s*(DOCTYPE|ENTITY)", text, re.I):
        raise UsageProblem(
            f"{what} declares a DOCTYPE or an entity; NCCL never writes one, so it is refused "
            "unread (no entity is expanded)"
        )
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise UsageProblem(f"{what} is not well-formed XML ({exc}): cut short?") from exc


def pci_bandwidth(speed: str | None, width: str | None) -> tuple[float, bool]:
    """NCCL's GB/s for a PCIe link, and whether NCCL had to fall back (unknown speed)."""
    rate = PCI_GEN_RATE.get((speed or "").strip())
    try:
        lanes = int(width or 0)
    except ValueError:
        lanes = 0
    return (lanes or 16) * (rate or PCI_FALLBACK_RATE) / 80.0, rate is None or not lanes


@dataclass
class NcclGpu:
    dev: int
    rank: int | None
    sm: int | None
    busid: str | None
    link_speed: str | None
    link_width: str | None
    nvlinks: list[dict]
    chain: list[str]  # pci busids from the CPU down to the GPU

    @property
    def assumed_pci_gbps(self) -> tuple[float, bool]:
        return pci_bandwidth(self.link_speed, self.link_width)

    def to_json(self) -> dict:
        bw, fallback = self.assumed_pci_gbps
        return {
            "dev": self.dev,
            "rank": self.rank,
            "sm": self.sm,
            "busid": self.busid,
            "link_speed": self.link_speed,
            "link_width": self.link_width,
            "nccl_pci_gbps": bw,
            "nccl_pci_fallback": fallback,
            "nvlinks": self.nvlinks,
            "pci_chain": self.chain,
        }


@dataclass
class NcclTopology:
    gpus: list[NcclGpu]
    cpus: list[dict]
    nics: list[dict]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "kind": "nccl-topology",
            "gpus": [g.to_json() for g in self.gpus],
            "cpus": self.cpus,
            "nics": self.nics,
            "notes": self.notes,
        }


def read_topology(text: str) -> NcclTopology:
    root = parse_xml(text, "NCCL topology dump")
    if root.tag != "system":
        raise UsageProblem(f"NCCL topology dump has root <{root.tag}>, expected <system>")
    gpus: list[NcclGpu] = []
    cpus: list[dict] = []
    nics: list[dict] = []
    for cpu in root.iter("cpu"):
        cpus.append({k: cpu.get(k) for k in ("numaid", "arch", "vendor", "familyid", "modelid")})
        _walk(cpu, [], gpus)
    for net in root.iter("net"):
        nics.append({k: net.get(k) for k in ("name", "dev", "speed", "gdr")})
    notes = []
    if not gpus:
        gpus = _gpus_by_class(root)
        notes.append(
            "no <gpu> nodes: a hand-written NCCL_TOPO_FILE rather than a dump; GPUs taken from the "
            "PCI nodes of class 0x03xxxx, numbered in file order (NCCL adds the real ones at run time)"
        )
    if not gpus:
        raise UsageProblem("NCCL topology file holds no <gpu> node and no GPU-class <pci> node")
    out = NcclTopology(sorted(gpus, key=lambda g: g.dev), cpus, nics, notes)
    selfish = [g.dev for g in out.gpus if any(n["target"] == g.busid for n in g.nvlinks)]
    if selfish:
        out.notes.append(
            f"GPU(s) {selfish}: an <nvlink> whose target is the GPU's own bus id (the file is "
            "inconsistent: an NVLink peer should be another device)"
        )
    fallback = [g.dev for g in out.gpus if g.assumed_pci_gbps[1]]
    if fallback:
        out.notes.append(
            f"GPU(s) {fallback}: no link speed/width in the dump, so NCCL assumed its fallback "
            f"({pci_bandwidth(None, None)[0]:.0f} GB/s, a Gen3 x16 link)"
        )
    return out


def _gpus_by_class(root: ET.Element) -> list[NcclGpu]:
    found = [p for p in root.iter("pci") if (p.get("class") or "").startswith("0x03")]
    return [
        NcclGpu(
            dev=k,
            rank=None,
            sm=None,
            busid=p.get("busid"),
            link_speed=p.get("link_speed"),
            link_width=p.get("link_width"),
            nvlinks=[],
            chain=[p.get("busid") or "?"],
        )
        for k, p in enumerate(found)
    ]


def _walk(node: ET.Element, chain: list[ET.Element], gpus: list[NcclGpu]) -> None:
    for child in node:
        if child.tag == "pci":
            _walk(child, chain + [child], gpus)
        elif child.tag == "gpu":
            pci = chain[-1] if chain else None
            gpus.append(
                NcclGpu(
                    dev=_int(child.get("dev"), "gpu dev"),
                    rank=_opt_int(child.get("rank")),
                    sm=_opt_int(child.get("sm")),
                    busid=pci.get("busid") if pci is not None else None,
                    link_speed=pci.get("link_speed") if pci is not None else None,
                    link_width=pci.get("link_width") if pci is not None else None,
                    nvlinks=[
                        {"target": n.get("target"), "count": _opt_int(n.get("count"))}
                        for n in child.findall("nvlink")
                    ],
                    chain=[p.get("busid") or "?" for p in chain],
                )
            )


@dataclass
class NcclGraph:
    id: int
    pattern: int
    nchannels: int
    speed_intra_gbps: float
    speed_inter_gbps: float
    type_intra: str
    type_inter: str
    channels: list[list[int]]

    @property
    def algorithm(self) -> str:
        if (
            self.id == COLLNET_CHAIN_ID
        ):  # searched with the tree pattern: only its id tells it from the tree
            return "collnet chain"
        return PATTERNS.get(self.pattern, f"pattern {self.pattern}")

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "pattern": self.pattern,
            "algorithm": self.algorithm,
            "nchannels": self.nchannels,
            "speed_intra_gbps_per_channel": self.speed_intra_gbps,
            "speed_inter_gbps_per_channel": self.speed_inter_gbps,
            "type_intra": self.type_intra,
            "type_inter": self.type_inter,
            "channels": self.channels,
        }


def read_graphs(text: str) -> list[NcclGraph]:
    root = parse_xml(text, "NCCL graph dump")
    if root.tag != "graphs":
        raise UsageProblem(f"NCCL graph dump has root <{root.tag}>, expected <graphs>")
    out = []
    for g in root.findall("graph"):
        channels = [
            [_int(n.get("dev"), "channel gpu dev") for n in ch.findall("gpu")]
            for ch in g.findall("channel")
        ]
        graph = NcclGraph(
            id=_int(g.get("id"), "graph id"),
            pattern=_int(g.get("pattern"), "graph pattern"),
            nchannels=_int(g.get("nchannels"), "nchannels"),
            speed_intra_gbps=_float(g.get("speedintra") or g.get("bwintra"), "speedintra"),
            speed_inter_gbps=_float(g.get("speedinter") or g.get("bwinter") or "0", "speedinter"),
            type_intra=g.get("typeintra") or "?",
            type_inter=g.get("typeinter") or "?",
            channels=channels,
        )
        if len(channels) != graph.nchannels:
            raise UsageProblem(
                f"NCCL graph {graph.id} says nchannels={graph.nchannels} but holds {len(channels)} "
                "<channel> nodes: cut short?"
            )
        out.append(graph)
    if not out:
        raise UsageProblem("NCCL graph dump holds no <graph> node")
    return out


def _int(value: str | None, what: str) -> int:
    if value is None or not is_digits(value.strip().removeprefix("-")):
        raise UsageProblem(f"NCCL dump: {what} {value!r} is not an integer")
    return int(value)


def _opt_int(value: str | None) -> int | None:
    return int(value) if value is not None and is_digits(value.strip().removeprefix("-")) else None


def _float(value: str | None, what: str) -> float:
    if value is None or not re.fullmatch(
        r"[0-9]{1,15}(?:\.[0-9]{1,15})?(?:e[+-]?[0-9]{1,3})?", value.strip(), re.I
    ):
        raise UsageProblem(f"NCCL dump: {what} {value!r} is not a number")
    return float(value)
