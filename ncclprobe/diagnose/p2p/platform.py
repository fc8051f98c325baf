"""Platform checks behind P2P health, judged from what `ncclprobe.evidence.live.platform` read: ACS
on the bridges above the GPUs, the IOMMU mode, each GPU's link generation and width, and what the
driver says about P2P (`nvidia-smi topo -p2p r/w/n`).

Every check names the source it read and what it could not read. NCCL's troubleshooting guide
(docs/troubleshooting.rst, "PCI Access Control Services") names ACS as the first cause of P2P hangs
and slowness: with ReqRedir/CmpltRedir on a switch port, peer traffic is sent up to the root complex.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.evidence.live.platform import (
    IOMMU_SOURCE,
    SMI_P2P,
    AcsReading,
    DriverP2PReading,
    IommuReading,
    PlatformReading,
    Runner,
    read_platform,
    run_command,
)
from ncclprobe.evidence.live.sysfs import GpuPath, link_generation


@dataclass
class PlatformCheck:
    """One platform check's result (not a finding: `advice` turns warnings into advice); `status` is
    "ok", "not readable", or the severity of what it found ("warning")."""

    name: str
    status: str
    source: str
    summary: str
    details: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # what could not be read here, and why
    evidence: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "check": self.name,
            "status": self.status,
            "source": self.source,
            "summary": self.summary,
            "details": self.details,
            "not_readable": self.unread,
            "evidence": self.evidence,
        }


def platform_checks(
    root: str | Path = "/", run: Runner = run_command, under_load: dict[str, dict] | None = None
) -> list[PlatformCheck]:
    """All four checks of this machine (read, then judged); `under_load` maps GPU BDF -> link
    state sampled during a transfer."""
    return judge_platform(read_platform(root, run, under_load))


def judge_platform(reading: PlatformReading) -> list[PlatformCheck]:
    """All four checks over what was read."""
    paths, reason = reading.paths, reading.paths_reason
    return [
        check_acs(paths, reason, reading.acs),
        check_iommu(paths, reading.iommu),
        check_links(paths, reason, reading.under_load),
        check_driver_p2p(reading.driver_p2p),
    ]


def check_acs(paths: list[GpuPath], reason: str | None, reading: AcsReading) -> PlatformCheck:
    if not paths:
        return PlatformCheck(
            "acs",
            "not readable",
            "sysfs",
            "no GPU found in sysfs, so no bridges to check",
            unread=[reason or "no GPU"],
        )
    if not reading.bridges:
        return PlatformCheck(
            "acs",
            "ok",
            "sysfs",
            "no PCIe bridge above the GPUs (each on a root bus, as in many VMs)",
            evidence={"gpus": [p.bdf for p in paths]},
        )
    acs, source = reading.bridges, reading.source
    unread = [f"{b}: {a.reason}" for b, a in acs.items() if not a.readable]
    redirecting = {b: a.redirects for b, a in acs.items() if a.readable and a.redirects}
    details = [
        f"{b}: ACSCtl " + " ".join(f"{k}{'+' if v else '-'}" for k, v in a.control.items())
        for b, a in acs.items()
        if a.readable and a.control
    ]
    evidence = {"bridges": {b: a.to_json() for b, a in acs.items()}}
    if redirecting:
        return PlatformCheck(
            "acs",
            "warning",
            source,
            f"ACS redirects peer-to-peer traffic to the root complex on {len(redirecting)} bridge(s) above the "
            "GPUs: " + ", ".join(f"{b} ({'/'.join(r)})" for b, r in redirecting.items()),
            details,
            unread,
            {**evidence, "redirecting": redirecting},
        )
    if len(unread) == len(acs):
        return PlatformCheck(
            "acs",
            "not readable",
            source,
            f"ACS of {len(acs)} bridge(s) not readable here",
            details,
            unread,
            evidence,
        )
    return PlatformCheck(
        "acs",
        "ok",
        source,
        f"no P2P redirect in ACS on {len(acs) - len(unread)} readable bridge(s)",
        details,
        unread,
        evidence,
    )


def check_iommu(paths: list[GpuPath], reading: IommuReading) -> PlatformCheck:
    """`paths`: the GPUs whose IOMMU groups were read (their types are in `reading`)."""
    units, cmdline, params, groups = (
        reading.units,
        reading.cmdline,
        reading.parameters,
        reading.group_types,
    )
    unread, details = list(reading.unread), []
    evidence = {"iommu_units": units, "kernel_parameters": params, "gpu_group_types": groups}
    details.append(
        f"/sys/class/iommu: {', '.join(units) if units else 'empty'}; kernel parameters: "
        + (" ".join(f"{k}={v}" for k, v in params.items()) or "none about the IOMMU")
    )
    translated = [b for b, t in groups.items() if t in ("DMA", "DMA-FQ")]
    source = IOMMU_SOURCE
    if translated:
        return PlatformCheck(
            "iommu",
            "warning",
            source,
            f"the IOMMU translates DMA for {', '.join(translated)} (group type "
            f"{groups[translated[0]]}): P2P and host copies pay for translation; iommu=pt "
            "(passthrough) avoids it",
            details,
            unread,
            evidence,
        )
    if units is None and not cmdline:
        return PlatformCheck(
            "iommu",
            "not readable",
            source,
            "neither /sys/class/iommu nor /proc/cmdline readable",
            details,
            unread,
            evidence,
        )
    mode = (
        "passthrough"
        if any(t == "identity" for t in groups.values())
        or params.get("iommu") == "pt"
        or params.get("iommu.passthrough") == "1"
        else "off"
        if not units
        else "on, GPU groups not translated"
    )
    return PlatformCheck(
        "iommu", "ok", source, f"IOMMU {mode}", details, unread, {**evidence, "mode": mode}
    )


def check_links(
    paths: list[GpuPath], reason: str | None, under_load: dict[str, dict]
) -> PlatformCheck:
    if not paths:
        return PlatformCheck(
            "link", "not readable", "sysfs", "no GPU found in sysfs", unread=[reason or "no GPU"]
        )
    details: list[str] = []
    unread: list[str] = []
    down: list[str] = []
    idle: list[str] = []
    for p in paths:
        link = under_load.get(p.bdf) or p.gpu.link
        when = "under load" if p.bdf in under_load else "at idle"
        cur, top = (
            link_generation(link.get("current_link_speed")),
            link_generation(link.get("max_link_speed")),
        )
        width, max_width = _int(link.get("current_link_width")), _int(link.get("max_link_width"))
        if cur is None or top is None or width is None or max_width is None:
            unread.append(f"GPU {p.bdf}: link speed/width not in sysfs ({link})")
            continue
        details.append(f"GPU {p.bdf}: Gen{cur} x{width} of Gen{top} x{max_width} ({when})")
        if width < max_width:
            down.append(f"GPU {p.bdf} runs x{width} of x{max_width}")
        if cur < top:
            (down if p.bdf in under_load else idle).append(
                f"GPU {p.bdf} at Gen{cur} of Gen{top} {when}"
            )
    source = "sysfs current_link_speed/current_link_width/max_link_*"
    if down:
        return PlatformCheck(
            "link",
            "warning",
            source,
            "link trained down: " + "; ".join(down),
            details,
            unread,
            {"downtrained": down, "idle_low_speed": idle},
        )
    if not details:
        return PlatformCheck(
            "link", "not readable", source, "no GPU link state readable", details, unread
        )
    summary = "every readable GPU link at its maximum generation and width"
    if idle:
        summary += (
            "; at idle " + "; ".join(idle) + " (GPUs lower the link speed when idle: read again "
            "during a transfer, as `topo --check` does)"
        )
    return PlatformCheck("link", "ok", source, summary, details, unread, {"idle_low_speed": idle})


def check_driver_p2p(reading: DriverP2PReading) -> PlatformCheck:
    matrices, unread = reading.matrices, reading.unread
    if not reading.smi:
        return PlatformCheck(
            "driver-p2p",
            "not readable",
            "nvidia-smi topo -p2p",
            "nvidia-smi is not on PATH",
            unread=unread,
        )
    if not matrices:
        return PlatformCheck(
            "driver-p2p", "not readable", SMI_P2P, "no P2P status readable", unread=unread
        )
    refused = sorted(
        {
            (i, j)
            for name in ("read", "write")
            for i, row in enumerate(matrices.get(name, []))
            for j, code in enumerate(row)
            if i < j and code not in ("OK", "X")
        }
    )
    details = [
        f"{name}: " + "; ".join(f"GPU{i}: {' '.join(row)}" for i, row in enumerate(m))
        for name, m in matrices.items()
    ]
    if refused:
        return PlatformCheck(
            "driver-p2p",
            "warning",
            SMI_P2P,
            f"the driver reports no P2P read/write for {len(refused)} GPU pair(s): "
            + " ".join(f"{i}-{j}" for i, j in refused[:12]),
            details,
            unread,
            {"status": matrices, "refused_pairs": [list(p) for p in refused]},
        )
    return PlatformCheck(
        "driver-p2p",
        "ok",
        SMI_P2P,
        "the driver reports P2P read and write OK for every GPU pair"
        if len(matrices.get("read", [])) > 1
        else "one GPU: no pair to report",
        details,
        unread,
        {"status": matrices},
    )


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None
