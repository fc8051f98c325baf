"""The one Report every judging command returns, and the rule sets that fill it.

Every command that judges takes one road: it gathers its sources into evidence, runs rule sets over
that evidence (`judge`), and gets one `Report`: the findings (ranked), what was ruled out, what was
not checked for want of evidence, notes on what the evidence cannot tell, and the inputs it read;
beside them the data the command shows (its `sections`, in print order: `Lines` of text, `Table`s
of rows, and `FINDINGS`, where the ranked findings go), the rows its CSV holds and the JSON document
it prints (each command's own schema, kept as it was: `document`). `diagnose.render` prints any
Report in the three formats; `Report.verdict()` is the exit code.

A rule set is data: its rules (each a function of the evidence returning findings, ruled-out and
not-checked outcomes), the evidence it needs (attribute names of the evidence: the set runs when
one of them holds something, or always when it names none, its rules then saying what is missing)
and, where it differs from the report's, the least severity of its findings that fails the verdict
(a lint's warning does not; a line that looks like a failure and is not explained does).
`diagnose` runs every rule set whose evidence is present; a narrower command runs its own.

Ranking: severity first (error, warning, info), then confidence, then what the user must fix first
(`FIX_FIRST`: the run did not run what was asked), then a cause that explains other findings'
numbers (`CAUSES_FIRST`: a late rank), then what fixing the cause surely wins (the low end of its
`Cost`, as a share of the run where known, largest first): a bound surely wins nothing
and ranks after every measured cost. A cause the evidence shows directly (a phase that is eager, a
setting a worker never had) thus outranks a symptom with a bigger number (speculative slower).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ncclprobe.findings import CONFIDENCES, Finding, NotChecked, RuledOut, severity_rank
from ncclprobe.verdict import Verdict

Outcome = Finding | RuledOut | NotChecked
Rule = Callable[[Any], Iterable[Outcome]]


@dataclass(frozen=True)
class RuleSet:
    """Rules and the evidence they need: the set runs when any attribute named in `needs` holds
    something (a list with items, a record), or always when `needs` is empty."""

    name: str
    rules: tuple[Rule, ...]
    needs: tuple[str, ...] = ()
    fails_at: str | None = None  # the least severity of its findings that fails; None: the report's

    def applies(self, evidence: object) -> bool:
        return not self.needs or any(getattr(evidence, name, None) for name in self.needs)


@dataclass
class Lines:
    """Text the table format prints as it is, each line wrapped to the terminal: a `#` line under
    `#   `, any other under its own indent; `Command` lines never (a next step is pasted whole)."""

    lines: list[str]


@dataclass
class Table:
    """Rows the table format prints as a table fitted to the terminal, under `# ` title and notes."""

    rows: list[dict]
    title: str | None = None
    notes: list[str] = field(default_factory=list)
    wide_rows: list[dict] | None = None  # the rows as --wide prints them (nothing shortened)


class _FindingsPlace:
    """Where, among a report's sections, the ranked findings, ruled-out and not-checked go."""

    def __repr__(self) -> str:
        return "FINDINGS"


FINDINGS = _FindingsPlace()
Section = Lines | Table | _FindingsPlace


@dataclass
class Report:
    """What a judging command found. `fails_at`: the least severity that makes the verdict FINDINGS
    (diagnose: a warning; a lint, a P2P check: an error); `answered`: False when nothing could be
    measured or read here (exit 3, unless a finding says more)."""

    kind: str
    findings: list[Finding] = field(default_factory=list)
    ruled_out: list[RuledOut] = field(default_factory=list)
    not_checked: list[NotChecked] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # the CSV, complete
    document: dict = field(default_factory=dict)  # the JSON, in the command's own schema
    data: dict = field(default_factory=dict)  # command-specific facts (e.g. the expected verify)
    fails_at: str = "warning"
    answered: bool = True
    failing: list[Finding] | None = None  # what fails, as each rule set's `fails_at` judged (judge)

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def actionable(self) -> list[Finding]:
        """The findings that decide the verdict: at their rule set's `fails_at` or worse (`judge`
        records which), else at the report's."""
        if self.failing is not None:
            failing = {id(f) for f in self.failing}
            return [f for f in self.findings if id(f) in failing]
        limit = severity_rank(self.fails_at)
        return [f for f in self.findings if severity_rank(f.severity) <= limit]

    def verdict(self) -> Verdict:
        if self.actionable():
            return Verdict.FINDINGS
        return Verdict.FINE if self.answered else Verdict.NOTHING_HERE

    def to_json(self) -> dict:
        return self.document

    @property
    def expectation(self) -> dict | None:
        """diagnose: how the expected verify/decode ratio was derived (None where not derived)."""
        return self.data.get("expected_verify")


# Findings that say the run did not run what the user asked (a setting NCCL ignores or rejects, one
# that never reached a worker): fixed first, since every other figure of the run was measured under
# them; and inputs of different machines (`rules_machines`), since no finding joins them then.
# Ahead of findings of the same severity and confidence.
FIX_FIRST = (
    "machines",
    "unsafe-settings",
    "env-check-sibling",
    "capture-settings",
    "settings-propagation",
    "env-check",
    "env-check-lint",
    "nccl-settings-read",
)


# Findings whose cause explains other findings' numbers: a rank that comes late to the collectives
# is why the others' collectives take their time (its wait shows there as collective time).
CAUSES_FIRST = ("late-rank",)


def rank_key(finding: Finding) -> tuple:
    cost = finding.cost
    return (
        severity_rank(finding.severity),
        CONFIDENCES.index(finding.confidence),
        finding.rule not in FIX_FIRST,
        finding.rule not in CAUSES_FIRST,
        -((cost.sure_share or 0.0) if cost else 0.0),
        -(cost.sure if cost else 0.0),
    )


def judge(
    evidence: object,
    rule_sets: Iterable[RuleSet],
    *,
    kind: str,
    fails_at: str = "warning",
    price: Callable[[list[Finding]], list[Finding]] | None = None,
    **fields: Any,
) -> Report:
    """Run every rule set whose evidence is present, in order, and rank what they found: the one
    function every judging command's verdict comes from. A finding fails the verdict at its rule
    set's `fails_at`, else at `fails_at`; `price` (diagnose: the time ledger) may restate the
    findings' costs before ranking, keeping their order; `fields` fill the rest of the Report."""
    outcomes, fails = [], []
    for rule_set in rule_sets:
        if not rule_set.applies(evidence):
            continue
        limit = severity_rank(rule_set.fails_at or fails_at)
        for outcome in (o for rule in rule_set.rules for o in rule(evidence)):
            outcomes.append(outcome)
            if isinstance(outcome, Finding):
                fails.append(severity_rank(outcome.severity) <= limit)
    findings = [o for o in outcomes if isinstance(o, Finding)]
    if price is not None:
        findings = price(findings)
    failing = [f for f, fail in zip(findings, fails, strict=True) if fail]
    return Report(
        kind=kind,
        findings=sorted(findings, key=rank_key),
        ruled_out=[o for o in outcomes if isinstance(o, RuledOut)],
        not_checked=[o for o in outcomes if isinstance(o, NotChecked)],
        fails_at=fails_at,
        failing=failing,
        **fields,
    )
