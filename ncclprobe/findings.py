"""What a diagnose rule can conclude about one hypothesis: a finding (a likely cause or a symptom
worth acting on), ruled out (checked against the evidence and not the cause), or not checked (the
evidence needed is missing; the next command says how to get it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITIES = ("error", "warning", "info")  # most to least serious
CONFIDENCES = ("high", "medium", "low")


@dataclass(frozen=True, kw_only=True)
class Finding:
    rule: str  # short id of the hypothesis, e.g. "eager-phase"
    severity: str  # "error" | "warning" | "info"
    confidence: str  # "high" | "medium" | "low": how directly the evidence shows it
    title: str  # one line
    detail: str  # the reasoning, with the numbers
    evidence: dict = field(default_factory=dict)  # the numbers it rests on; units in key names
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
