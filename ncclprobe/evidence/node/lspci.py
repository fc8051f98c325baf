"""Read `lspci -vvv` text: ACS capability/control and link capability/status per device.

`lspci -vvv` prints, per device, a header line (`0000:03:02.0 PCI bridge: ...` or `03:02.0 ...`)
and indented capability lines; ACS appears as `ACSCap:\tSrcValid+ TransBlk- ReqRedir+ ...` and
`ACSCtl:\t...` under `Access Control Services`, links as `LnkCap:\tPort #0, Speed 16GT/s, Width x16`
and `LnkSta:\tSpeed 2.5GT/s (downgraded), Width x16`. Run without root, lspci prints
`Capabilities: <access denied>` instead: that device's ACS is then unreadable, and said so.
"""

from __future__ import annotations

from ncclprobe.evidence.live.sysfs import ACS_BITS, Acs
from ncclprobe.evidence.text import clean_line
from ncclprobe.numbers import ascii_re

_HEADER = ascii_re(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4,5}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<what>.+)$"
)
_FLAGS = ascii_re(r"(?<![A-Za-z])(?P<name>[A-Za-z]+)(?P<on>[+-])")  # a run's start only: linear
_LINK = ascii_re(r"Speed (?P<speed>\d{1,3}(?:\.\d{1,3})?)GT/s.{0,200}?Width x(?P<width>\d{1,3})")


def parse_lspci(text: str) -> dict[str, dict]:
    """BDF (with domain) -> {"name", "acs": Acs, "link_cap", "link_status"}."""
    devices: dict[str, dict] = {}
    current = None
    for raw in text.splitlines():
        line = clean_line(raw)
        header = _HEADER.match(line)
        if header and not raw[:1].isspace():
            bdf = header["bdf"].lower()
            bdf = bdf if bdf.count(":") == 2 else "0000:" + bdf
            current = devices.setdefault(
                bdf,
                {
                    "name": header["what"],
                    "acs": None,
                    "link_cap": None,
                    "link_status": None,
                    "denied": False,
                },
            )
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("Capabilities: <access denied>"):
            current["denied"] = True
        elif stripped.startswith(("ACSCap:", "ACSCtl:")):
            flags = {m["name"]: m["on"] == "+" for m in _FLAGS.finditer(stripped.split(":", 1)[1])}
            acs = current["acs"] or Acs(True)
            setattr(
                acs,
                "capability" if stripped.startswith("ACSCap") else "control",
                {b: flags.get(b, False) for b in ACS_BITS},
            )
            current["acs"] = acs
        elif stripped.startswith(("LnkCap:", "LnkSta:")):
            m = _LINK.search(stripped)
            if m:
                current["link_cap" if stripped.startswith("LnkCap") else "link_status"] = {
                    "speed_gts": float(m["speed"]),
                    "width": int(m["width"]),
                }
    for entry in devices.values():
        if entry["acs"] is None:
            entry["acs"] = (
                Acs(False, "lspci could not read the capabilities (not root)")
                if entry["denied"]
                else Acs(True, "no ACS capability")
            )
    return devices
