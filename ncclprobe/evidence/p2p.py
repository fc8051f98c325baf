"""P2P evidence, from whichever source: matrices measured here (`topo --check`, with the platform it
ran on and NCCL's own topology and graph dumps) or read from a tool's output (p2pBandwidthLatencyTest,
nvbandwidth: `import`). One record, so the P2P rule set (`ncclprobe.diagnose.p2p`) reads one shape;
what a source cannot give stays empty and its rules say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.evidence.failure_lines import FailureLines
from ncclprobe.evidence.live.platform import PlatformReading
from ncclprobe.evidence.live.sysfs import GpuPath
from ncclprobe.evidence.node.matrix import Matrix
from ncclprobe.evidence.node.topo import Topology


@dataclass
class P2PEvidence:
    matrices: list[Matrix]
    peer_access: list[list[bool | None]] | None = None  # the driver's answer per GPU pair
    tool: str | None = None  # the tool whose output it is (imports); None: measured here
    reported_corrupt: list[dict] = field(default_factory=list)  # a tool's own failed checks
    failure_lines: FailureLines | None = None  # a tool's output's (`evidence.failure_lines`)
    # measured here only
    measurement: dict | None = (
        None  # the probe's status, reason, devices, notes, copy checks, hung pair
    )
    platform: PlatformReading | None = None
    nccl: dict | None = (
        None  # the NCCL job's result, its dumps parsed (`topology_obj`, `graphs_obj`)
    )
    topology: Topology | None = None  # `nvidia-smi topo -m`: the path types P2P-level advice needs
    gpu_paths: list[GpuPath | None] = field(default_factory=list)  # PCIe path per measured GPU

    @property
    def measured(self) -> bool:
        """Whether a GPU pair or host copy was measured (or read) at all."""
        return bool(self.matrices)

    def copy_checks(self) -> list[dict]:
        return (self.measurement or {}).get("copy_checks") or []
