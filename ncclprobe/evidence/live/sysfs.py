"""The PCIe tree above each GPU, its link state and ACS, read from sysfs (Linux's /sys).

Layout (as the kernel lays it out): `/sys/bus/pci/devices/<BDF>` links to
`/sys/devices/pci<domain>:<bus>/<root port BDF>/<switch port BDF>/.../<GPU BDF>`; every device
directory has `vendor`, `device`, `class`, `current_link_speed`/`current_link_width`/`max_link_speed`/
`max_link_width` (PCIe devices) and `config` (configuration space). Unprivileged readers get only the
first 64 bytes of `config`; the ACS capability sits in extended space (offset >= 0x100), so without
root ACS is "not readable here" and says why. Nothing here raises on a missing file: each reading
carries its own reason.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

# PCI domains are 4 hex digits, or 5 behind an Intel VMD controller (`10000:e1:00.0`)
_BDF = re.compile(r"^[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST = re.compile(r"^pci[0-9a-f]{4,5}:[0-9a-f]{2}$")
NVIDIA = "0x10de"
ACS_ID = 0x000D
# ACS capability/control bits (PCIe base spec 7.7.11; lspci's names)
ACS_BITS = (
    "SrcValid",
    "TransBlk",
    "ReqRedir",
    "CmpltRedir",
    "UpstreamFwd",
    "EgressCtrl",
    "DirectTrans",
)
# bits that send peer-to-peer requests up to the root complex instead of across the switch
P2P_REDIRECT = ("ReqRedir", "CmpltRedir", "EgressCtrl")


@dataclass
class Acs:
    readable: bool
    reason: str = ""  # why not readable, or "no ACS capability"
    capability: dict[str, bool] = field(default_factory=dict)
    control: dict[str, bool] = field(default_factory=dict)

    @property
    def redirects(self) -> list[str]:
        return [b for b in P2P_REDIRECT if self.control.get(b)]

    def to_json(self) -> dict:
        return {
            "readable": self.readable,
            "reason": self.reason,
            "capability": self.capability,
            "control": self.control,
            "redirects_p2p": self.redirects,
        }


@dataclass
class PciNode:
    bdf: str
    vendor: str | None
    device: str | None
    pci_class: str | None
    link: dict  # current/max speed and width, None where unreadable
    acs: Acs

    @property
    def is_bridge(self) -> bool:
        return bool(self.pci_class and self.pci_class.startswith("0x0604"))

    def to_json(self) -> dict:
        return {
            "bdf": self.bdf,
            "vendor": self.vendor,
            "device": self.device,
            "class": self.pci_class,
            "link": self.link,
            "acs": self.acs.to_json(),
        }


@dataclass
class GpuPath:
    bdf: str
    host_bridge: str  # pci0000:00
    chain: list[PciNode]  # root port first, the GPU last

    @property
    def gpu(self) -> PciNode:
        return self.chain[-1]

    @property
    def bridges(self) -> list[PciNode]:
        return [n for n in self.chain[:-1] if n.is_bridge]

    def to_json(self) -> dict:
        return {
            "bdf": self.bdf,
            "host_bridge": self.host_bridge,
            "chain": [n.to_json() for n in self.chain],
        }


def read_gpu_paths(root: str | Path = "/") -> tuple[list[GpuPath], str | None]:
    """Every NVIDIA display/3D controller with its chain of bridges; (paths, reason when none)."""
    devices = Path(root) / "sys/bus/pci/devices"
    try:
        names = sorted(os.listdir(devices))
    except OSError as exc:
        return [], f"{devices} not readable: {exc.strerror or exc}"
    paths = []
    for name in names:
        if _read(devices / name / "vendor") == NVIDIA and (
            _read(devices / name / "class") or ""
        ).startswith("0x03"):
            paths.append(_path(Path(root), devices / name))
    return paths, None if paths else f"no NVIDIA GPU under {devices}"


def _path(root: Path, link: Path) -> GpuPath:
    real = Path(os.path.realpath(link))
    parts = real.parts
    host = next((i for i, p in enumerate(parts) if _HOST.match(p)), None)
    if host is None:
        return GpuPath(link.name, "unknown", [_node(real)])
    chain, here = [], Path(*parts[: host + 1])
    for part in parts[host + 1 :]:
        here = here / part
        if _BDF.match(part):
            chain.append(_node(here))
    return GpuPath(link.name, parts[host], chain)


def _node(directory: Path) -> PciNode:
    link = {
        key: _read(directory / key)
        for key in ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
    }
    return PciNode(
        bdf=directory.name,
        vendor=_read(directory / "vendor"),
        device=_read(directory / "device"),
        pci_class=_read(directory / "class"),
        link=link,
        acs=read_acs(directory / "config"),
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def read_acs(config: Path) -> Acs:
    try:
        data = config.read_bytes()
    except OSError as exc:
        return Acs(False, f"{config} not readable: {exc.strerror or exc}")
    return parse_acs(data)


def parse_acs(data: bytes) -> Acs:
    """The ACS capability from configuration-space bytes (walks the extended capability list)."""
    if len(data) <= 0x100:
        return Acs(
            False,
            f"only {len(data)} bytes of configuration space readable (extended space, where "
            "ACS lives, needs root): run as root or give `lspci -vvv` output",
        )
    offset, seen = 0x100, set()
    while offset and offset + 8 <= len(data) and offset not in seen:
        seen.add(offset)
        (header,) = struct.unpack_from("<I", data, offset)
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == ACS_ID:
            cap, ctl = struct.unpack_from("<HH", data, offset + 4)
            return Acs(True, "", _bits(cap), _bits(ctl))
        offset = (header >> 20) & 0xFFC
    return Acs(True, "no ACS capability")


def _bits(value: int) -> dict[str, bool]:
    return {name: bool(value >> bit & 1) for bit, name in enumerate(ACS_BITS)}


def crossing(a: GpuPath, b: GpuPath) -> str:
    """Where traffic between two GPUs turns around: a PCIe switch, a root complex, or the CPU link."""
    if a.host_bridge != b.host_bridge:
        return f"different host bridges {a.host_bridge} and {b.host_bridge} (through the CPU interconnect)"
    common = None
    for x, y in zip(a.chain[:-1], b.chain[:-1]):
        if x.bdf != y.bdf:
            break
        common = x
    if common is None:
        ports = " and ".join(sorted({a.chain[0].bdf, b.chain[0].bdf}))
        return f"root complex {a.host_bridge} (root ports {ports})"
    ident = f" [{common.vendor}:{common.device}]" if common.vendor else ""
    return f"PCIe switch above {common.bdf}{ident}"


GEN_OF_SPEED = {
    "2.5": 1,
    "5.0": 2,
    "5": 2,
    "8.0": 3,
    "8": 3,
    "16.0": 4,
    "16": 4,
    "32.0": 5,
    "32": 5,
    "64.0": 6,
    "64": 6,
}


def link_generation(speed: str | None) -> int | None:
    """PCIe generation from a sysfs speed string such as `16.0 GT/s PCIe` (None when unknown)."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?) GT/s", speed or "")
    return GEN_OF_SPEED.get(m[1]) if m else None
