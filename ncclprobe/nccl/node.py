"""What NCCL's topology-dependent rules need to know about the GPUs a job runs on.

`NodeFacts` is built from a topology's NCCL path types (`from_path_types`, fed by
`ncclprobe.evidence.node.topo.node_facts`), stored in a sweep's results header and an engine trace
(`to_json` / `from_json`), and read by the lint, recommend, run-engine and diagnose. Every field
may be unknown (None); the rules then say what they could not decide instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

# How NVLink joins the GPUs, in the terms of NCCL's ring search (paths of type NVL or NVB,
# NVLink directly or through one GPU, count as NVLink hops; src/graph/paths.cc, search.cc)
NVLINK_ALL = "nvlink-all"  # every pair is an NVLink hop: any ring NCCL builds is NVLink only
NVLINK_RING = "nvlink-ring"  # an NVLink-only ring through every GPU exists, but some pairs are PCIe
NVLINK_PARTIAL = "nvlink-partial"  # some NVLink, but no ring through every GPU avoids PCIe
NO_NVLINK = "no-nvlink"
ONE_GPU = "one-gpu"  # no hop between GPUs at all
LINKS = (NVLINK_ALL, NVLINK_RING, NVLINK_PARTIAL, NO_NVLINK, ONE_GPU)
_LEAST_NVLINK_FIRST = (NO_NVLINK, NVLINK_PARTIAL, NVLINK_RING, NVLINK_ALL, ONE_GPU)
_NVLINK_HOPS = ("NVL", "NVB")
_SEARCH_LIMIT = 16  # GPUs beyond which the ring search is not attempted (links unknown)


@dataclass(frozen=True)
class NodeFacts:
    links: str | None = None  # one of LINKS
    compute_capabilities: tuple[int, ...] | None = None  # per GPU, major*10+minor (86 = sm86)
    over_network: bool = False  # ranks meet over NET (--share-gpu, other hosts)
    # NCCL's path type from the GPUs to the NIC the ranks meet through (the second of a GRAPH line's
    # `type <intra>/<inter>`, e.g. PXB): what NCCL's LL128 rule checks of the network hop
    net_path: str | None = None
    # every pair of the job's GPUs is direct NVLink (NVL), none only through another GPU (NVB)
    nvlink_direct: bool | None = None

    @property
    def any_nvlink(self) -> bool | None:
        if self.links is None:
            return None
        return self.links in (NVLINK_ALL, NVLINK_RING, NVLINK_PARTIAL)

    def to_json(self) -> dict:
        return {
            "links": self.links,
            "nvlink": self.any_nvlink,
            "over_network": self.over_network,
            "compute_capabilities": list(self.compute_capabilities)
            if self.compute_capabilities
            else None,
            "net_path": self.net_path,
            "nvlink_direct": self.nvlink_direct,
        }

    @classmethod
    def from_json(cls, doc: dict | None, *, over_network: bool = False) -> NodeFacts:
        """From `to_json`, or from an older header that only said whether any NVLink was seen."""
        doc = doc if isinstance(doc, dict) else {}  # another writer's node of another type: unknown
        links = (
            doc.get("links")
            if isinstance(doc.get("links"), str) and doc["links"] in LINKS
            else None
        )
        if links is None and doc.get("nvlink") is False:
            links = NO_NVLINK
        caps = doc.get("compute_capabilities")
        net_path = doc.get("net_path")
        direct = doc.get("nvlink_direct")
        return cls(
            links=links,
            compute_capabilities=tuple(caps) if _whole_numbers(caps) else None,
            over_network=over_network or bool(doc.get("over_network")),
            net_path=net_path if isinstance(net_path, str) else None,
            nvlink_direct=direct if isinstance(direct, bool) else None,
        )

    @classmethod
    def from_path_types(
        cls,
        types: Sequence[Sequence[str | None]],
        *,
        gpus: Iterable[int] | None = None,
        compute_capabilities: Sequence[int] | None = None,
        over_network: bool = False,
    ) -> NodeFacts:
        """`types[i][j]`: NCCL's path type between GPUs i and j (None unknown); `gpus`: the ones the
        job uses (default all)."""
        chosen = list(gpus) if gpus is not None else list(range(len(types)))
        caps = tuple(compute_capabilities[i] for i in chosen) if compute_capabilities else None
        pairs = [types[i][j] for a, i in enumerate(chosen) for j in chosen[a + 1 :]]
        return cls(
            links=classify_links(types, chosen),
            compute_capabilities=caps,
            over_network=over_network,
            nvlink_direct=None if not pairs or None in pairs else all(t == "NVL" for t in pairs),
        )

    @classmethod
    def merge(cls, facts: list[NodeFacts]) -> NodeFacts:
        """Several files about one setup: what they agree on; the least NVLink when they disagree."""
        if not facts:
            return cls()
        links = {f.links for f in facts}
        caps = {f.compute_capabilities for f in facts}
        nets = {f.net_path for f in facts}
        direct = {f.nvlink_direct for f in facts}
        worst = None if None in links else min(links, key=_LEAST_NVLINK_FIRST.index)
        return cls(
            links=worst,
            compute_capabilities=caps.pop() if len(caps) == 1 else None,
            over_network=any(f.over_network for f in facts),
            net_path=nets.pop() if len(nets) == 1 else None,
            nvlink_direct=False if False in direct else True if direct == {True} else None,
        )


def classify_links(types: Sequence[Sequence[str | None]], gpus: list[int]) -> str | None:
    """How NVLink joins `gpus` (one of LINKS); None when a link is unknown or there are too many GPUs."""
    if len(gpus) < 2:
        return ONE_GPU
    pairs = [(i, j) for a, i in enumerate(gpus) for j in gpus[a + 1 :]]
    if any(types[i][j] is None for i, j in pairs):
        return None
    hop = {(i, j) for i, j in pairs if types[i][j] in _NVLINK_HOPS} | {
        (j, i) for i, j in pairs if types[i][j] in _NVLINK_HOPS
    }
    if len(hop) == 2 * len(pairs):
        return NVLINK_ALL
    if not any(types[i][j] == "NVL" for i, j in pairs):
        return NO_NVLINK
    if len(gpus) > _SEARCH_LIMIT:
        return None
    return NVLINK_RING if _ring_exists(gpus, hop) else NVLINK_PARTIAL


def _ring_exists(gpus: list[int], hop: set[tuple[int, int]]) -> bool:
    """A ring through every GPU whose every step is an NVLink hop (a Hamiltonian cycle), by
    depth-first search from the first GPU; two GPUs need one hop."""
    if len(gpus) == 2:
        return (gpus[0], gpus[1]) in hop
    start = gpus[0]

    def extend(path: list[int], left: set[int]) -> bool:
        if not left:
            return (path[-1], start) in hop
        return any(extend(path + [n], left - {n}) for n in sorted(left) if (path[-1], n) in hop)

    return extend([start], set(gpus[1:]))


def _whole_numbers(values: object) -> TypeGuard[list[int] | tuple[int, ...]]:
    """A non-empty list of whole numbers (compute capabilities as a results header records them)."""
    return (
        isinstance(values, (list, tuple))
        and bool(values)
        and all(type(v) is int and 0 <= v < 1000 for v in values)
    )
