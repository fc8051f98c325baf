"""NCCL settings to judge, with what sharpens the judgement: the GPUs' facts (`nccl.node.NodeFacts`,
from a saved or live topology, a collect-env text, or what an NCCL log shows) and the NCCL version.
Whose settings they are (this environment, a collect-env text, what an NCCL log says NCCL read) is
`source`. The settings rule set (`ncclprobe.diagnose.settings.lint`) reads this record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.nccl.node import NodeFacts


@dataclass
class SettingsEvidence:
    env: dict[str, str]  # NCCL_* variables (others are ignored by the rules)
    node: NodeFacts | None = None  # None: the GPUs' links are not known
    nccl_version: str | None = None  # None: not known
    source: str = "this environment"
    notes: list[str] = field(default_factory=list)  # what the source cannot tell
