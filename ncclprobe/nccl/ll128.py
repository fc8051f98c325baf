"""Whether NCCL turns LL128 on by itself on a node, and so whether forcing it overrides NCCL's safety check.

LL128 relies on 128-byte stores reaching the peer in order; NCCL enables it by default only where
that chain was verified, because elsewhere it can corrupt data silently (NVIDIA/nccl#786, #831).
Its rule, `ncclTopoTuneModel` in src/graph/tuning.cc (read at v2.18.5-1, v2.21.5-1, v2.23.4-1,
v2.24.3-1, v2.25.1-1, v2.26.6-1, v2.27.3-1, v2.27.7-1, v2.28.9-1, v2.30.7-1): while NCCL_PROTO
leaves LL128 at "auto", it is on only when
  - every intra-node hop of the ring/tree NCCL built is NVLink, directly or through one GPU
    (`typeIntra <= PATH_NVB`);
  - the hop between nodes is at most PXB (one node: always true; ranks that meet over the network
    transport, as under --share-gpu, never);
  - every GPU has the same compute capability (2.30+: or all are sm90 or newer);
  - the architecture is known good: up to 2.24 exactly sm70, sm80 or sm90 (`switch (minCompCap)`,
    `default: pEnable &= 0`: sm75, sm86, sm89 stay off); 2.25 and 2.26 also sm100 and sm120;
    2.27+ any sm70 or newer.
Not modelled: sm90 with CUDA 11.8 keeps it off for ring all-reduce on two ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.nccl.node import (
    NO_NVLINK,
    NVLINK_ALL,
    NVLINK_PARTIAL,
    NVLINK_RING,
    ONE_GPU,
    NodeFacts,
)
from ncclprobe.nccl.version import Version

_ARCHS_UP_TO_2_24 = (70, 80, 90)
_ARCHS_2_25_TO_2_26 = (70, 80, 90, 100, 120)


@dataclass(frozen=True)
class Ll128Default:
    on: bool | None  # None: it depends on something not known here
    why: str

    @property
    def summary(self) -> str:
        """What this verdict says to someone forcing LL128."""
        if self.on is False:
            return f"NCCL keeps LL128 off here ({self.why})"
        if self.on is None:
            return f"nothing shows that NCCL would keep LL128 on here ({self.why})"
        return f"NCCL keeps LL128 on here itself ({self.why})"


def ll128_default(node: NodeFacts | None, version: Version | None) -> Ll128Default:
    """NCCL's own LL128 decision on this node with this NCCL version."""
    if node is None:
        return Ll128Default(None, "the GPUs' links are not known")
    links = _links(node)
    if links.on is not True:
        return links
    return _architecture(node.compute_capabilities, version)


def _links(node: NodeFacts) -> Ll128Default:
    if node.over_network:
        return Ll128Default(
            False, "the ranks meet over the network transport (NET/Socket), not NVLink"
        )
    return {
        NVLINK_ALL: Ll128Default(True, "every GPU pair is NVLink"),
        ONE_GPU: Ll128Default(True, "no hop between GPUs"),
        NVLINK_RING: Ll128Default(
            None,
            "an NVLink-only ring through every GPU exists but some pairs are PCIe: it "
            "depends on the ring NCCL's search picks (its GRAPH `Pattern ... type` lines)",
        ),
        NVLINK_PARTIAL: Ll128Default(
            False, "NVLink does not join every GPU into one ring, so some hop is PCIe"
        ),
        NO_NVLINK: Ll128Default(False, "no NVLink between the GPUs: every hop is PCIe"),
    }.get(node.links, Ll128Default(None, "the GPUs' links are not known"))


def _architecture(caps: tuple[int, ...] | None, version: Version | None) -> Ll128Default:
    if not caps:
        return Ll128Default(
            None, "the GPUs' compute capability is not known (NCCL enables LL128 only on some)"
        )
    low, high = min(caps), max(caps)
    if low < 70:
        return Ll128Default(False, f"sm{low} is older than Volta (sm70)")
    if low != high:
        mixed = f"the GPUs differ (sm{low} and sm{high})"
        if low < 90 or (version is not None and version < (2, 30, 0)):
            return Ll128Default(False, mixed)
        if version is None:
            return Ll128Default(
                None, mixed + "; NCCL 2.30+ allows that from sm90, older versions do not"
            )
    allowed = _known_good(version)
    if allowed is None:
        if low in _ARCHS_UP_TO_2_24:
            return Ll128Default(True, f"every hop NVLink and sm{low}")
        return Ll128Default(
            None,
            f"NCCL 2.27+ enables LL128 on sm{low}, older versions do not; the version is unknown",
        )
    if allowed and low not in allowed:
        shown = "/".join(f"sm{a}" for a in allowed)
        return Ll128Default(
            False,
            f"NCCL {'.'.join(map(str, version))} enables LL128 by default only on {shown}, "
            f"not sm{low}",
        )
    return Ll128Default(True, f"every hop NVLink and sm{low}")


def _known_good(version: Version | None) -> tuple[int, ...] | None:
    """The architectures NCCL `version` enables LL128 on (empty: any sm70+); None when unknown."""
    if version is None:
        return None
    if version < (2, 25, 0):
        return _ARCHS_UP_TO_2_24
    if version < (2, 27, 0):
        return _ARCHS_2_25_TO_2_26
    return ()
