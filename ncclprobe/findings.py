"""What an analysis can conclude: the one `Finding` type, with the one severity vocabulary and order.

A finding is a likely cause or a symptom worth acting on: its rule, severity, confidence, title,
detail, the next command (what to run to confirm or fix it), the evidence it rests on and what it
costs (`Cost`: a value or a range in a unit, and what kind of figure it is, so a bound is never
read as a cost). diagnose returns these directly; the settings lint (`nccl.lint_finding.SettingFinding`) and the
P2P matrix findings (`diagnose.p2p.findings.P2PFinding`) are built on it, keeping the fields and JSON
their outputs always had. A diagnose rule can also conclude ruled out (checked against the
evidence and not the cause) or not checked (the evidence needed is missing; the next command says
how to get it). Check results that are not findings (an expectation met or missed, a platform
check) stay small records of their own, but whatever severity they carry is one of SEVERITIES."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

SEVERITIES = ("error", "warning", "info")  # most to least serious: the one order
CONFIDENCES = ("high", "medium", "low")


def severity_rank(severity: str) -> int:
    """The one severity order, as a sort key: errors first, then warnings, then notes."""
    return SEVERITIES.index(severity)


# What kind of figure a cost is (docs/METRICS.md "Costs"):
MEASURED = "measured"  # a difference of two measured runs (or a run against a measurement)
PROFILED = "profiled"  # measured under the profiler, which inflates host work: at most the figure
BOUND = "bound"  # at most: what fixing the cause could win, not what it costs
MODELLED = "modelled"  # from a model (the bytes a step moves), not measured
COST_KINDS = (MEASURED, PROFILED, BOUND, MODELLED)
COST_UNITS = ("token", "step", "call", "cycle")


@dataclass(frozen=True, kw_only=True)
class Cost:
    """What a finding costs, saying what the figure is: a value or a range (`low`..`high`, ms per
    `unit`), its kind (COST_KINDS) and its basis (which time it covers, in words).

    `low` is what fixing the cause surely wins (the ranking key): a bound's is 0, a profiled
    figure's is its value over the profiler's known inflation (`inflation`: the unprofiled cost
    lies between high / inflation and high). `covers` places the time in the run's time ledger
    (`diagnose.run.ledger`): a path such as ("verify", "idle") under the run named `run`, so two
    findings never count the same millisecond; `total_ms` is the high end over the run's whole
    time, the ledger's unit, and `share` the high end's share of the run (the ledger sets it)."""

    low: float
    high: float
    unit: str
    kind: str
    basis: str
    inflation: float | None = None
    run: str | None = None
    covers: tuple[str, ...] = ()
    total_ms: float | None = None  # the high end over the run's whole time (the ledger's unit)
    share: float | None = None

    def __post_init__(self):
        if self.kind not in COST_KINDS:
            raise ValueError(f"cost kind must be one of {COST_KINDS}, got {self.kind!r}")
        if self.unit not in COST_UNITS:
            raise ValueError(f"cost unit must be one of {COST_UNITS}, got {self.unit!r}")
        if not all(math.isfinite(v) and v >= 0 for v in (self.low, self.high)):
            raise ValueError(f"a cost is a finite time >= 0, got {self.low!r}..{self.high!r}")
        if self.low > self.high:
            raise ValueError(f"a cost's low end {self.low} is above its high end {self.high}")
        if not isinstance(self.basis, str) or not self.basis:
            raise ValueError("a cost says which time it covers: its basis, in words")
        if self.kind == BOUND and self.low != 0:
            raise ValueError("a bound says 'at most': its low end is 0")
        if self.inflation is not None and not (
            math.isfinite(self.inflation) and self.inflation >= 1
        ):
            raise ValueError(f"a profiler's inflation is a factor >= 1, got {self.inflation!r}")

    @classmethod
    def measured(cls, value: float, unit: str, basis: str, *, high=None, **kw) -> Cost:
        """A difference of measurements: `value`, or `value`..`high` where its spread is known."""
        return cls(
            low=value,
            high=value if high is None else high,
            unit=unit,
            kind=MEASURED,
            basis=basis,
            **kw,
        )

    @classmethod
    def profiled(cls, value: float, unit: str, basis: str, *, inflation=None, **kw) -> Cost:
        """Measured under the profiler: the unprofiled figure lies between value / inflation (the
        profiler's largest known inflation of this kind of time) and value."""
        low = value / inflation if inflation else value
        return cls(
            low=low, high=value, unit=unit, kind=PROFILED, basis=basis, inflation=inflation, **kw
        )

    @classmethod
    def bound(cls, high: float, unit: str, basis: str, **kw) -> Cost:
        """At most `high`: what fixing the cause could win, which may be nothing."""
        return cls(low=0.0, high=high, unit=unit, kind=BOUND, basis=basis, **kw)

    @classmethod
    def modelled(cls, value: float, unit: str, basis: str, *, low=None, high=None, **kw) -> Cost:
        return cls(
            low=value if low is None else low,
            high=value if high is None else high,
            unit=unit,
            kind=MODELLED,
            basis=basis,
            **kw,
        )

    @property
    def sure(self) -> float:
        """What fixing the cause surely wins, ms per unit: the ranking key."""
        return self.low

    @property
    def sure_share(self) -> float | None:
        """The share of the run's time fixing the cause surely wins (None: the share is unknown)."""
        if self.share is None or not self.high:
            return None
        return self.share * self.low / self.high

    def capped(self, high: float, why: str) -> Cost:
        """The same cost with no more than `high` of it (the time ledger granted only that)."""
        if high >= self.high:
            return self
        high = max(0.0, high)
        part = high / self.high if self.high else 0.0
        return replace(
            self,
            low=min(self.low, high),
            high=high,
            share=None if self.share is None else self.share * part,
            total_ms=None if self.total_ms is None else self.total_ms * part,
            basis=f"{self.basis}; {why}",
        )

    def header(self) -> str:
        """The one-line header fragment: 'at most 3.1 ms/step (bound)', 'costs 2-2.6 ms/token
        (measured)', 'costs 1.1-2.4 ms/token (profiled, up to 2.2x inflated)'."""
        unit = f"ms/{self.unit}"
        if self.kind == BOUND:
            return f"at most {_ms(self.high)} {unit} (bound)"
        figure = (
            _ms(self.high)
            if _ms(self.low) == _ms(self.high)
            else f"{_ms(self.low)}-{_ms(self.high)}"
        )
        if self.kind == MODELLED:
            return f"about {figure} {unit} (modelled)"
        if self.kind == PROFILED and self.inflation:
            return f"costs {figure} {unit} (profiled, up to {self.inflation:g}x inflated)"
        return f"costs {figure} {unit} ({self.kind})"

    def to_json(self) -> dict:
        return {
            "low": self.low,
            "high": self.high,
            "unit": self.unit,
            "kind": self.kind,
            "basis": self.basis,
            "inflation": self.inflation,
            "run": self.run,
            "covers": list(self.covers),
            "total_ms": self.total_ms,
            "share": self.share,
        }


def _ms(value: float) -> str:
    """Milliseconds to three significant digits, never in exponent form."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}" if value >= 0.001 else "0"


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
    cost: Cost | None = None  # what it costs, and what kind of figure that is

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence must be one of {CONFIDENCES}, got {self.confidence!r}")

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["cost"] = self.cost.to_json() if self.cost else None
        return doc

    def cost_header(self) -> str:
        """', at most 3.1 ms/step (bound)' for a finding's one-line header; '' without a cost."""
        return f", {self.cost.header()}" if self.cost and self.cost.high > 0 else ""


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


# what a rule returns, each of them: a cause found, one ruled out, one the evidence cannot check
Outcome = Finding | RuledOut | NotChecked


def severity_for_share(
    share: float | None, *, error_at: float = 0.10, warn_at: float = 0.02
) -> str:
    """Severity from the share of time per token a cause costs: >=10% error, >=2% warning."""
    if share is None:
        return "warning"
    if share >= error_at:
        return "error"
    return "warning" if share >= warn_at else "info"
