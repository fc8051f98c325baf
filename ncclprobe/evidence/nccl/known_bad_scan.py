"""What an NCCL log shows that the known-bad table (`nccl.known_bad`) needs beyond the parsed log:
NCCL's own lines of a known failure (the table's signatures), and the GPUs the log names
(nccl-tests' `#  Rank  0 Group  0 Pid 4766 on GENOA-06 device  0 [0x21] NVIDIA GeForce RTX 5090`),
read in one more streamed pass over the files."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.evidence.nccl.nccl_log import NcclLog
from ncclprobe.evidence.text import read_text_lines
from ncclprobe.nccl.known_bad import ROWS, Match, capability_of, matching

_DEVICE = re.compile(
    r"^#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+\S+\s+device\s+\d+\s+\[[^\]]*\]\s+"
    r"(?P<name>.+?)\s*$"
)
_SIGNATURES = [re.compile(row.signature) for row in ROWS if row.signature]


@dataclass
class Scan:
    lines: list[str] = field(default_factory=list)  # NCCL's lines of a known failure
    gpu_names: list[str] = field(default_factory=list)

    @property
    def capabilities(self) -> set[int]:
        return {c for c in map(capability_of, self.gpu_names) if c is not None}


def scan(paths: Iterable[str | Path]) -> Scan:
    found = Scan()
    for path in paths:
        for line in read_text_lines(Path(path), "NCCL log"):
            device = _DEVICE.match(line.strip())
            if device and device["name"] not in found.gpu_names:
                found.gpu_names.append(device["name"])
            elif "NCCL" in line and any(p.search(line) for p in _SIGNATURES):
                if len(found.lines) < 20:
                    found.lines.append(line.strip())
    return found


def known_bad_in_logs(
    paths: Iterable[str | Path],
    log: NcclLog,
    capabilities: Iterable[int] = (),
    host_arch: str | None = None,
) -> tuple[list[Match], Scan]:
    """The known-bad rows NCCL's logs fall in: their version, the GPUs they (or `capabilities`,
    from elsewhere) name, and the failure lines they hold; a row whose workaround NCCL read is
    left out. RCCL's logs carry the NCCL release RCCL follows, but the rows are NVIDIA NCCL's own
    failures (sm120, cuMem, its proxy): none applies to RCCL."""
    found = scan(paths)
    if log.library == "RCCL":
        return [], found
    caps = set(capabilities) | found.capabilities
    return (
        matching(log.nccl_version, caps, host_arch=host_arch, lines=found.lines, read=log.env),
        found,
    )
