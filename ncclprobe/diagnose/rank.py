"""Run every rule, rank the findings, and build the report.

Ranking: severity first (error, warning, info), then confidence, then what the user must fix first
(`FIX_FIRST`: the run did not run what was asked), then the estimated cost per generated token
(largest first). A cause the evidence shows directly (a phase that is eager, a
setting a worker never had) thus outranks a symptom with a bigger number (speculative slower).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.diagnose import rules_failures
from ncclprobe.diagnose.hang import rules_arrival, rules_hang, rules_nccl_log, rules_stacks
from ncclprobe.diagnose.process_env import rules_capture, rules_envcheck
from ncclprobe.diagnose.run import (
    rules,
    rules_draft,
    rules_host,
    rules_log,
    rules_profile,
    rules_spec_config,
)
from ncclprobe.diagnose.run.expectations import expected_verify_ratio
from ncclprobe.diagnose.settings import (
    rules_known_bad,
    rules_nccl_run,
    rules_safety,
    rules_settings,
)
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.findings import CONFIDENCES, Finding, NotChecked, RuledOut, severity_rank
from ncclprobe.verdict import Verdict

SCHEMA_VERSION = 1
# rules about an engine run: they need one (a hang's evidence comes without)
RUN_RULES = (
    rules.RULES
    + rules_draft.RULES
    + rules_profile.RULES
    + rules_host.RULES
    + rules_log.RULES
    + rules_spec_config.RULES
    + rules_nccl_run.RULES
)
ALL_RULES = (
    (rules_safety.unsafe_settings,)
    + rules_settings.RULES
    + rules_known_bad.RULES
    + rules_envcheck.RULES
    + rules_capture.RULES
    + RUN_RULES
    + rules_hang.RULES
    + rules_arrival.RULES
    + rules_stacks.RULES
    + rules_nccl_log.RULES
    + rules_failures.RULES
)


@dataclass
class Diagnosis:
    findings: list[Finding]
    ruled_out: list[RuledOut]
    not_checked: list[NotChecked]
    inputs: dict = field(default_factory=dict)
    expectation: dict | None = None
    notes: list[str] = field(default_factory=list)  # what the evidence cannot tell
    kind: str = "engine-trace"

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def actionable(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != "info"]

    def verdict(self) -> Verdict:
        return Verdict.of(bool(self.actionable()))

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "diagnosis",
            "evidence_kind": self.kind,
            "inputs": self.inputs,
            "expected_verify": self.expectation,
            "notes": self.notes,
            "findings": [f.to_json() for f in self.findings],
            "ruled_out": [r.to_json() for r in self.ruled_out],
            "not_checked": [n.to_json() for n in self.not_checked],
        }


# Findings that say the run did not run what the user asked (a setting NCCL ignores or rejects, one
# that never reached a worker): fixed first, since every other figure of the run was measured under
# them. Ahead of findings of the same severity and confidence.
FIX_FIRST = (
    "unsafe-settings",
    "env-check-sibling",
    "capture-settings",
    "settings-propagation",
    "env-check",
    "nccl-settings-read",
)


# Findings whose cause explains other findings' numbers: a rank that comes late to the collectives
# is why the others' collectives take their time (its wait shows there as collective time).
CAUSES_FIRST = ("late-rank",)


def rank_key(finding: Finding) -> tuple:
    return (
        severity_rank(finding.severity),
        CONFIDENCES.index(finding.confidence),
        finding.rule not in FIX_FIRST,
        finding.rule not in CAUSES_FIRST,
        -(finding.cost_ms_per_token or 0.0),
        -(finding.cost_ms_per_step or 0.0),
    )


def diagnose(ev: Evidence) -> Diagnosis:
    ran = bool(ev.runs or ev.baseline)
    outcomes = [item for rule in ALL_RULES if ran or rule not in RUN_RULES for item in rule(ev)]
    findings = sorted((o for o in outcomes if isinstance(o, Finding)), key=rank_key)
    expectation = expected_verify_ratio(ev.config)
    return Diagnosis(
        findings=findings,
        ruled_out=[o for o in outcomes if isinstance(o, RuledOut)],
        not_checked=[o for o in outcomes if isinstance(o, NotChecked)],
        inputs={k: v for k, v in ev.inputs.items() if v},
        kind=ev.kind,
        notes=list(ev.notes) + rules_hang.notes(ev),
        expectation=expectation.to_json() if expectation else None,
    )
