"""Whether NCCL turns LL128 on by itself, and so whether forcing it overrides NCCL's safety check.

LL128 relies on 128-byte stores reaching the peer in order; NCCL enables it by default only where
that chain was verified, because elsewhere it can corrupt data silently (NVIDIA/nccl#786, #831).
Its rule, `ncclTopoTuneModel` in src/graph/tuning.cc (read at every tag of `READ_AT`), while
NCCL_PROTO leaves LL128 at "auto", keeps it on only when all of these hold:
  - intra-node: every hop of the ring/tree NCCL built is NVLink: directly (`typeIntra <= PATH_NVL`)
    before 2.18.3, directly or through one GPU (`<= PATH_NVB`) from 2.18.3;
  - the network hop (`typeInter`, the path from the GPUs to the NIC; one node: PIX, so always true):
    within PXB; from 2.17 also within PXN on sm90+; on 2.27.3 within P2C (NCCL_LL128_C2C=1, the
    default) or PXN (0) on sm90+; from 2.27.5 within PXN on sm90+ with NCCL_LL128_C2C=1, else PXB.
    The order of the path types changed too (C2C from 2.26, P2C from 2.27.3 after PXN, from 2.27.5
    before it);
  - every GPU has the same compute capability (2.30+: or all are sm90 or newer);
  - the architecture is known good: exactly sm70 or sm80 before 2.15, also sm90 from 2.15, also
    sm100 and sm120 from 2.25 (`switch (minCompCap)`, `default: pEnable &= 0`: sm75, sm86, sm89
    stay off); 2.27+ any sm70 or newer.
Each input the evidence lacks (the network hop's path type, the compute capability, the version)
makes the verdict "not known" (on=None), never "off". Not modelled: sm90 with CUDA 11.8 keeps it
off for ring all-reduce on two ranks; NCCL older than 2.8.3.
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
from ncclprobe.nccl.p2p import path_types
from ncclprobe.nccl.values import parse_integer
from ncclprobe.nccl.version import Version, tagged

# the NCCL tags whose tuning.cc rule (and topo.h path order) this module was read against
READ_AT = (
    "v2.8.3-1",
    "v2.14.3-1",
    "v2.15.1-1",
    "v2.15.5-1",
    "v2.17.1-1",
    "v2.18.1-1",
    "v2.18.3-1",
    "v2.18.5-1",
    "v2.21.5-1",
    "v2.23.4-1",
    "v2.24.3-1",
    "v2.25.1-1",
    "v2.26.2-1",
    "v2.26.6-1",
    "v2.27.3-1",
    "v2.27.5-1",
    "v2.27.7-1",
    "v2.28.9-1",
    "v2.29.7-1",
    "v2.30.3-1",
    "v2.30.7-1",
)
# every release the rule was read at: an unknown version is judged at each of them
_RELEASES = tuple(tagged(tag) for tag in READ_AT)
OLDEST = _RELEASES[0]
_ARCHS_BEFORE_2_15 = (70, 80)
_ARCHS_BEFORE_2_25 = (70, 80, 90)
_ARCHS_BEFORE_2_27 = (70, 80, 90, 100, 120)


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


def ll128_default(
    node: NodeFacts | None, version: Version | None, *, ll128_c2c: str | None = None
) -> Ll128Default:
    """NCCL's own LL128 decision on this node with this NCCL version; `ll128_c2c` is the value of
    NCCL_LL128_C2C (None: unset, NCCL's default 1)."""
    if node is None:
        return Ll128Default(None, "the GPUs' links are not known")
    if version is not None:
        if version < OLDEST:
            return Ll128Default(None, "NCCL's rule was not read for versions before 2.8.3")
        return _at(node, version, ll128_c2c)
    verdicts = [
        _at(node, release, ll128_c2c)
        for release in _RELEASES
        if not node.over_network or node.net_path in (None, *path_types(release))
    ]  # a network hop NCCL names exists only in the versions whose path types hold the name
    if verdicts and len({v.on for v in verdicts}) == 1:
        return verdicts[-1]
    return Ll128Default(
        None,
        f"the NCCL version is not known, and NCCL's rule differs between versions here (current "
        f"versions: {verdicts[-1].summary})",
    )


def _at(node: NodeFacts, version: Version, ll128_c2c: str | None) -> Ll128Default:
    caps = node.compute_capabilities or None
    return _all(
        (
            _intra(node, version),
            _network(node, version, caps, ll128_c2c),
            _architecture(caps, version),
        )
    )


def _all(parts: tuple[Ll128Default, ...]) -> Ll128Default:
    """NCCL's `pEnable &= ...`: off if any condition is off, else not known if any is not known."""
    for decided in (False, None):
        for part in parts:
            if part.on is decided:
                return part
    return Ll128Default(True, ", ".join(p.why for p in parts if p.why))


def _intra(node: NodeFacts, version: Version) -> Ll128Default:
    if node.links == NVLINK_ALL and version < (2, 18, 3) and node.nvlink_direct is not True:
        return Ll128Default(
            None,
            "before 2.18.3 NCCL wants every hop direct NVLink (NVL), and "
            + (
                "some GPU pairs are NVLink only through another GPU (NVB): it depends on the ring "
                "NCCL's search picks"
                if node.nvlink_direct is False
                else "whether some GPU pairs are NVLink only through another GPU (NVB) is not "
                "known from this evidence"
            ),
        )
    return {
        NVLINK_ALL: Ll128Default(True, "every hop NVLink"),
        ONE_GPU: Ll128Default(True, ""),
        NVLINK_RING: Ll128Default(
            None,
            "an NVLink-only ring through every GPU exists but some pairs are PCIe: it "
            "depends on the ring NCCL's search picks (its GRAPH `Pattern ... type` lines)",
        ),
        NVLINK_PARTIAL: Ll128Default(
            False, "NVLink does not join every GPU into one ring, so some hop is PCIe"
        ),
        NO_NVLINK: Ll128Default(False, "no NVLink between the GPUs: every hop is PCIe"),
    }.get(node.links or "", Ll128Default(None, "the GPUs' links are not known"))


def _network(
    node: NodeFacts, version: Version, caps: tuple[int, ...] | None, ll128_c2c: str | None
) -> Ll128Default:
    """NCCL's `typeInter` condition: the path from the GPUs to the NIC the ranks meet through."""
    if not node.over_network:
        return Ll128Default(True, "")  # one node: typeInter stays at PIX (ncclTopoCompute)
    net = node.net_path
    order = path_types(version)
    if net is None or net not in order:
        return Ll128Default(
            None,
            "the ranks meet over the network, and the path type of that hop (the second of NCCL's "
            "GRAPH `type <intra>/<inter>`) is not known from this evidence",
        )
    hop = order.index(net)
    if hop <= order.index("PXB"):
        return Ll128Default(True, f"the network hop is {net} (within PXB)")
    limit = _beyond_pxb_limit(version, ll128_c2c)
    if limit is None:
        return Ll128Default(
            None, f"NCCL_LL128_C2C={ll128_c2c!r} is not an integer, so NCCL's limit is not known"
        )
    if not limit or hop > order.index(limit):
        return Ll128Default(
            False, f"the network hop is {net}, beyond what NCCL {_shown(version)} allows LL128 over"
        )
    if not caps:
        return Ll128Default(
            None,
            f"the network hop is {net}, which NCCL allows LL128 over only on sm90 and newer, and the "
            "GPUs' compute capability is not known",
        )
    if min(caps) < 90:
        return Ll128Default(
            False, f"the network hop is {net}, which NCCL allows only on sm90 and newer"
        )
    return Ll128Default(True, f"the network hop is {net} (within {limit} on sm90+)")


def _beyond_pxb_limit(version: Version, ll128_c2c: str | None) -> str | None:
    """The furthest network hop beyond PXB NCCL keeps LL128 over on sm90+ ("": none); None when
    NCCL_LL128_C2C is set to something NCCL's strtoll reading cannot be predicted for here."""
    if version < (2, 17, 0):
        return ""
    if version < (2, 27, 0):
        return "PXN"
    c2c = 1 if ll128_c2c is None or ll128_c2c == "" else parse_integer(ll128_c2c)
    if c2c is None:
        return None
    if version < (2, 27, 5):
        return "P2C" if c2c else "PXN"
    return "PXN" if c2c else ""


def _architecture(caps: tuple[int, ...] | None, version: Version) -> Ll128Default:
    if not caps:
        return Ll128Default(
            None, "the GPUs' compute capability is not known (NCCL enables LL128 only on some)"
        )
    low, high = min(caps), max(caps)
    if low < 70:
        return Ll128Default(False, f"sm{low} is older than Volta (sm70)")
    if low != high and (low < 90 or version < (2, 30, 0)):
        return Ll128Default(False, f"the GPUs differ (sm{low} and sm{high})")
    allowed = _known_good(version)
    if allowed and low not in allowed:
        shown = "/".join(f"sm{a}" for a in allowed)
        return Ll128Default(
            False, f"NCCL {_shown(version)} enables LL128 by default only on {shown}, not sm{low}"
        )
    return Ll128Default(True, f"sm{low} GPUs")


def _known_good(version: Version) -> tuple[int, ...]:
    """The architectures NCCL `version` enables LL128 on (empty: any sm70+)."""
    if version < (2, 15, 0):
        return _ARCHS_BEFORE_2_15
    if version < (2, 25, 0):
        return _ARCHS_BEFORE_2_25
    if version < (2, 27, 0):
        return _ARCHS_BEFORE_2_27
    return ()


def _shown(version: Version) -> str:
    return ".".join(map(str, version))
