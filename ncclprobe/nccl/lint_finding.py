"""What every rule of the NCCL settings lint builds and reads: `SettingFinding`, a finding about one
setting (its rule id, what NCCL will do with the value, the fix), and `Context`, the environment's
NCCL_* variables with what sharpens a verdict (the node's facts, the NCCL version; None is unknown).

The rules are written in `lint_datapath` and `lint_tooling`, their order in `ncclprobe.nccl.lint`;
this module sits below all three so the rule files do not import the lint that runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ncclprobe.findings import Finding
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.version import Version


@dataclass(frozen=True, init=False)
class SettingFinding(Finding):
    """A finding about one NCCL setting: `code` is its rule, `message` its title, `fix` its next
    command. Built positionally, as every lint rule writes it; its JSON keeps the lint's keys."""

    variable: str | None = None

    def __init__(self, severity: str, variable: str | None, message: str, fix: str, code: str = ""):
        super().__init__(
            rule=code,  # stable rule id, e.g. "ll128-without-nvlink", for callers that filter
            severity=severity,
            confidence="high",  # the knowledge table says what NCCL does with the value
            title=message,
            detail="",
            next_command=fix,
        )
        object.__setattr__(self, "variable", variable)

    @property
    def message(self) -> str:
        return self.title

    @property
    def fix(self) -> str:
        return self.next_command

    @property
    def code(self) -> str:
        return self.rule

    def to_json(self) -> dict:
        return {
            "severity": self.severity,
            "variable": self.variable,
            "message": self.message,
            "fix": self.fix,
            "code": self.code,
        }


@dataclass(frozen=True)
class Context:
    env: Mapping[str, str]
    node: NodeFacts | None
    version: Version | None
    # the NCCL functions the job calls (`allreduce`, ...); None: not known (a job's environment)
    collectives: frozenset[str] | None = None

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool | None:
        return None if self.version is None else self.version >= (major, minor, patch)
