"""Advice from P2P evidence, each item with the findings and checks it rests on.

The rules follow NCCL's troubleshooting guide and its P2P code: wrong data or hangs over P2P ->
NCCL_P2P_DISABLE=1 (until the platform is fixed); peer access slower than staged copies on some
path types only -> an NCCL_P2P_LEVEL below those path types (from the topology: NCCL allows P2P when
path type <= level, ncclTopoCheckP2p); ACS redirecting P2P on the bridges -> disable ACS (BIOS, or
`setpci` on each bridge; in a VM ACS is the hypervisor's and stays); a translated IOMMU -> iommu=pt;
a link trained down -> a hardware or BIOS fix, no NCCL setting helps. When nothing fires, the advice
is to change nothing, with the evidence that says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.diagnose.p2p.findings import P2PFinding
from ncclprobe.diagnose.p2p.platform import PlatformCheck
from ncclprobe.evidence.node.topo import Topology, nccl_path_types, p2p_level_pairs
from ncclprobe.nccl.p2p import P2P_LEVELS, PATH_TYPES


@dataclass(frozen=True)
class Advice:
    action: str  # one line the user can act on
    reason: str
    setting: dict = field(
        default_factory=dict
    )  # NCCL variables to set, when the advice is a setting
    evidence: tuple = ()  # finding codes and check names it rests on

    def to_json(self) -> dict:
        return {
            "action": self.action,
            "reason": self.reason,
            "setting": self.setting,
            "evidence": list(self.evidence),
        }


def advise(
    findings: list[P2PFinding],
    checks: list[PlatformCheck],
    topology: Topology | None = None,
    *,
    measured: bool = True,
) -> list[Advice]:
    codes = {f.code: f for f in findings}
    by_check = {c.name: c for c in checks}
    out: list[Advice] = []
    if "copy-corrupt" in codes or "p2p-hang" in codes:
        bad = codes.get("copy-corrupt") or codes["p2p-hang"]
        out.append(
            Advice(
                "set NCCL_P2P_DISABLE=1 until the platform is fixed",
                f"P2P moved wrong data or hung: {bad.message}",
                {"NCCL_P2P_DISABLE": "1"},
                (bad.code,),
            )
        )
    elif "host-copy-corrupt" in codes:
        bad = codes["host-copy-corrupt"]
        out.append(
            Advice(
                "check the GPU and its PCIe link (reseat, a lower slot generation in the BIOS, the "
                "driver's Xid messages) before any NCCL tuning",
                bad.message,
                {},
                (bad.code,),
            )
        )
    elif "p2p-slower-than-staged" in codes:
        out.append(_level_advice(codes["p2p-slower-than-staged"], topology))
    acs = by_check.get("acs")
    if acs and acs.status == "warning":
        hurt = [
            c
            for c in ("p2p-slower-than-staged", "slow-pair", "copy-corrupt", "p2p-hang")
            if c in codes
        ]
        out.append(
            Advice(
                "disable ACS on the bridges above the GPUs (BIOS: ACS/IOMMU options; or per bridge "
                "`setpci -s BDF ECAP_ACS+0x6.w=0000` as root, until reboot); in a VM leave it to the "
                "hypervisor",
                acs.summary
                + (
                    f"; and the measurements show {', '.join(hurt)}"
                    if hurt
                    else "; NCCL's troubleshooting guide names ACS as the first cause of P2P hangs"
                ),
                {},
                ("acs",) + tuple(hurt),
            )
        )
    iommu = by_check.get("iommu")
    if iommu and iommu.status == "warning":
        out.append(
            Advice(
                "boot with iommu=pt (passthrough) or turn the IOMMU off for bare-metal GPU work",
                iommu.summary,
                {},
                ("iommu",),
            )
        )
    link = by_check.get("link")
    if link and link.status == "warning":
        out.append(
            Advice(
                "reseat the card or riser, or set the slot's PCIe generation in the BIOS: no NCCL "
                "setting recovers lost lanes",
                link.summary,
                {},
                ("link",),
            )
        )
    if "slow-pair" in codes and not any(a.setting for a in out):
        slow = codes["slow-pair"]
        out.append(
            Advice(
                "check the link and switch of the slow pair(s) before tuning NCCL",
                slow.message,
                {},
                ("slow-pair",),
            )
        )
    if not out and not measured:
        readable = [c.name for c in checks if c.status != "not readable"]
        out.append(
            Advice(
                "no advice on NCCL settings: no GPU pair or host copy was measured here",
                "the platform checks that could be read ("
                + (", ".join(readable) or "none")
                + ") found nothing to change",
                {},
                tuple(readable),
            )
        )
    if not out:
        looked = sorted({f.code for f in findings} | {c.name for c in checks if c.status == "ok"})
        scope = ", ".join(looked) or (
            "the matrices for slow, asymmetric and refused pairs, peer access against "
            "staged copies, latency outliers"
            if measured
            else "nothing readable"
        )
        out.append(
            Advice(
                "nothing to change",
                f"no finding calls for an NCCL setting or a platform change (checked: {scope})",
                {},
                tuple(looked),
            )
        )
    return out


def _level_advice(slow: P2PFinding, topology: Topology | None) -> Advice:
    pairs = [tuple(p) for p in slow.pairs]
    gpus = slow.evidence.get("gpus")
    if gpus and len(set(pairs)) == gpus * (gpus - 1):
        return Advice(
            "set NCCL_P2P_DISABLE=1",
            f"{slow.message}; every GPU pair, both ways, so no P2P level keeps a fast pair",
            {"NCCL_P2P_DISABLE": "1"},
            (slow.code,),
        )
    if topology is None or len(topology.gpus) <= max(max(p) for p in pairs):
        return Advice(
            "set NCCL_P2P_LEVEL below the path type of the slow pairs (or NCCL_P2P_DISABLE=1 if every "
            "pair is slow); give the topology (`nvidia-smi topo -m`) to name the level",
            slow.message,
            {},
            (slow.code,),
        )
    types = nccl_path_types(topology)
    bad = {types[i][j] for i, j in pairs if types[i][j]}
    worst_ok = min((PATH_TYPES.index(t) for t in bad), default=None)
    levels = [lv for lv in P2P_LEVELS if worst_ok is not None and PATH_TYPES.index(lv) < worst_ok]
    same = p2p_level_pairs(topology)
    if not levels or not same[levels[-1]]:
        return Advice(
            "set NCCL_P2P_DISABLE=1",
            f"{slow.message}; the slow pairs' path types "
            f"({', '.join(sorted(bad))}) leave no P2P level that keeps a fast pair",
            {"NCCL_P2P_DISABLE": "1"},
            (slow.code,),
        )
    level = next(
        lv for lv in levels if same[lv] == same[levels[-1]]
    )  # the lowest level with the same pairs
    return Advice(
        f"set NCCL_P2P_LEVEL={level}",
        f"{slow.message}; those pairs cross {', '.join(sorted(bad))}, "
        f"and NCCL uses P2P only up to the level's path type",
        {"NCCL_P2P_LEVEL": level},
        (slow.code,),
    )
