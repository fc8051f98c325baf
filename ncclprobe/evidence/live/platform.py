"""What this machine's platform says about P2P, read: ACS on the bridges above the GPUs (sysfs config
space, else `lspci -vvv`), the IOMMU (its units, the kernel's parameters, each GPU's group type), each
GPU's link state, and the driver's P2P support (`nvidia-smi topo -p2p r/w/n`).

Readings only: each names its source and what it could not read, because containers and VMs hide
much of this (config space beyond 64 bytes needs root; a VM shows virtual bridges). Whether a
reading is a problem is `ncclprobe.diagnose.p2p.platform`'s question. Sources are passed in (root
directory, command runner) so tests read real layouts built in a temporary directory.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.evidence.live.sysfs import Acs, GpuPath, read_gpu_paths
from ncclprobe.evidence.node.lspci import parse_lspci
from ncclprobe.evidence.node.topo import parse_p2p_status

Runner = Callable[
    [list[str]], "tuple[int, str] | None"
]  # argv -> (exit code, stdout), None if absent
IOMMU_PARAMETERS = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict")
IOMMU_SOURCE = "/sys/class/iommu, /proc/cmdline, /sys/bus/pci/devices/*/iommu_group/type"
SMI_P2P = "nvidia-smi topo -p2p r/w/n"


def run_command(argv: list[str], timeout: float = 30.0) -> tuple[int, str] | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, f"{argv[0]} failed: {exc}"
    return proc.returncode, proc.stdout if proc.returncode == 0 else (proc.stderr or proc.stdout)


@dataclass
class AcsReading:
    """ACS of every bridge above the GPUs, from sysfs, the unreadable ones from `lspci -vvv`."""

    bridges: dict[str, Acs]
    source: str


@dataclass
class IommuReading:
    units: list[str] | None  # /sys/class/iommu; None: not readable
    cmdline: str | None
    parameters: dict[str, str]  # the kernel's IOMMU parameters
    group_types: dict[str, str | None]  # GPU BDF -> its IOMMU group's type
    unread: list[str] = field(default_factory=list)


@dataclass
class DriverP2PReading:
    """`nvidia-smi topo -p2p` per mode (read, write, nvlink); `smi` False: nvidia-smi is absent."""

    matrices: dict[str, list[list[str]]]
    unread: list[str] = field(default_factory=list)
    smi: bool = True


@dataclass
class PlatformReading:
    """Everything the platform checks judge, read once."""

    paths: list[GpuPath]
    paths_reason: str | None
    acs: AcsReading
    iommu: IommuReading
    under_load: dict[str, dict]  # GPU BDF -> link state sampled during a transfer
    driver_p2p: DriverP2PReading


def read_platform(
    root: str | Path = "/", run: Runner = run_command, under_load: dict[str, dict] | None = None
) -> PlatformReading:
    paths, reason = read_gpu_paths(root)
    return PlatformReading(
        paths,
        reason,
        read_acs(paths, run),
        read_iommu(Path(root), paths),
        under_load or {},
        read_driver_p2p(run),
    )


def read_acs(paths: list[GpuPath], run: Runner) -> AcsReading:
    acs = {n.bdf: n.acs for p in paths for n in p.bridges}
    source = "sysfs config space"
    unreadable = [b for b, a in acs.items() if not a.readable]
    if unreadable:
        listed = run(["lspci", "-vvv"])
        if listed and listed[0] == 0:
            from_lspci = parse_lspci(listed[1])
            for bdf in unreadable:
                if bdf in from_lspci:
                    acs[bdf] = from_lspci[bdf]["acs"]
            source = "sysfs config space, then lspci -vvv"
    return AcsReading(acs, source)


def read_iommu(root: Path, paths: list[GpuPath]) -> IommuReading:
    unread: list[str] = []
    units = _listdir(root / "sys/class/iommu", unread)
    cmdline = _text(root / "proc/cmdline", unread)
    params = {
        k: v
        for k, _, v in (w.partition("=") for w in (cmdline or "").split())
        if k in IOMMU_PARAMETERS
    }
    groups = {
        p.bdf: _text(root / "sys/bus/pci/devices" / p.bdf / "iommu_group/type", None) for p in paths
    }
    return IommuReading(units, cmdline, params, groups, unread)


def read_driver_p2p(run: Runner) -> DriverP2PReading:
    matrices, unread = {}, []
    for mode, name in (("r", "read"), ("w", "write"), ("n", "nvlink")):
        result = run(["nvidia-smi", "topo", "-p2p", mode])
        if result is None:
            return DriverP2PReading({}, ["nvidia-smi not on PATH"], smi=False)
        status = parse_p2p_status(result[1]) if result[0] == 0 else None
        if status is None:
            unread.append(
                f"nvidia-smi topo -p2p {mode}: " + (result[1].strip()[:200] or f"exit {result[0]}")
            )
        else:
            matrices[name] = status
    return DriverP2PReading(matrices, unread)


def _listdir(path: Path, unread: list[str]) -> list[str] | None:
    try:
        return sorted(p.name for p in path.iterdir())
    except OSError as exc:
        unread.append(f"{path}: {exc.strerror or exc}")
        return None


def _text(path: Path, unread: list[str] | None) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError as exc:
        if unread is not None:
            unread.append(f"{path}: {exc.strerror or exc}")
        return None
