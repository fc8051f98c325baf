"""What an analysis can conclude: the one `Finding` type, with the one severity vocabulary and order.

A finding is a likely cause or a symptom worth acting on: its rule, severity, confidence, title,
detail, the next command (what to run to confirm or fix it), the evidence it rests on and what it
costs. diagnose returns these directly; the settings lint (`nccl.lint_finding.SettingFinding`) and the
P2P matrix findings (`diagnose.p2p.findings.P2PFinding`) are built on it, keeping the fields and JSON
their outputs always had. A diagnose rule can also conclude ruled out (checked against the
evidence and not the cause) or not checked (the evidence needed is missing; the next command says
how to get it). Check results that are not findings (an expectation met or missed, a platform
check) stay small records of their own, but whatever severity they carry is one of SEVERITIES."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITIES = ("error", "warning", "info")  # most to least serious: the one order
CONFIDENCES = ("high", "medium", "low")


def severity_rank(severity: str) -> int:
    """The one severity order, as a sort key: errors first, then warnings, then notes."""
    return SEVERITIES.index(severity)


@dataclass(frozen=True, kw_only=True)
class Finding:
    rule: str  # short id of the hypothesis, e.g. "eager-phase"
    severity: str  # "error" | "warning" | "info"
    confidence: str  # "high" | "medium" | "low": how directly the evidence shows it
    title: str  # one line
    detail: str  # the reasoning, with the numbers
    evidence: dict = field(
        default_factory=dict, hash=False
    )  # the numbers it rests on; units in keys
    next_command: str = ""  # what to run to confirm or fix it
    cost_ms_per_token: float | None = None  # estimated time it costs per generated token
    cost_ms_per_step: float | None = None  # ... per step of the phase it concerns (profiles)

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence must be one of {CONFIDENCES}, got {self.confidence!r}")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class RuledOut:
    rule: str
    hypothesis: str  # what was suspected
    reason: str  # why the evidence excludes it, with the numbers

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class NotChecked:
    rule: str
    hypothesis: str
    missing: str  # which evidence is missing
    next_command: str = ""  # how to get it

    def to_json(self) -> dict:
        return asdict(self)


def severity_for_share(
    share: float | None, *, error_at: float = 0.10, warn_at: float = 0.02
) -> str:
    """Severity from the share of time per token a cause costs: >=10% error, >=2% warning."""
    if share is None:
        return "warning"
    if share >= error_at:
        return "error"
    return "warning" if share >= warn_at else "info"
