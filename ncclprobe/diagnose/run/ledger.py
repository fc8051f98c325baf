"""One time ledger per run: each millisecond of a run is attributed to at most one finding, so the
ranked costs never add past the run, or past the measured difference from a baseline, and what no
finding explains is said.

A finding's `Cost` declares the time it covers: `run` (the run's name, `EngineRun.name(source)`),
`covers` (a path under the run) and `total_ms` (its high end over the run's whole time). The ledger
keeps a tree of nodes per run, each with its size where the evidence gives one:

- `()`: the run's time (a profile: its phases at their median step, `profile_costs.run_ms`; an
  engine trace: its generation time), or, where a finding's cost covers WHOLE (a measured
  difference from a baseline: speculative against plain decoding), that difference if smaller;
- `(phase,)`: the phase's time; `(phase, "idle")`: the GPU idle time inside its steps;
  `(phase, "collective")`: the time a collective kernel ran in them;
- `("collective",)`: the run's time in collectives (its measured share), with `("collective",
  "wait")` and `("collective", "transfer")` below it (waiting for a late rank, moving data).

A claim takes at most what is left in every node along its path, the root included. A node whose
size the evidence does not give is as large as the largest claim on it: claims on one such node
describe the same time (`("verify", "excess")`: the verify's time above the bytes model, which
eager-phase and verify-ratio both weigh). Claims are settled surest first (measured, profiled,
modelled, then bound; then the larger low end), so a bound never takes time a measured cause
explains. A finding granted less than it asked keeps the part granted, and its basis says which
findings hold the rest.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

from ncclprobe.diagnose.run import profile_costs as C
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import BOUND, MEASURED, MODELLED, PROFILED, Cost, Finding, severity_rank

WHOLE = ("whole",)  # a cost that is the run's measured difference from its baseline: the pool
SUREST_FIRST = (MEASURED, PROFILED, MODELLED, BOUND)
IDLE, COLLECTIVE, WAIT, TRANSFER = "idle", "collective", "wait", "transfer"


@dataclass
class Account:
    """One run's ledger: node sizes (ms over the run), what claims used, and who used it."""

    run: str
    total_ms: float
    basis: str  # what the root is, in words
    sizes: dict[tuple, float] = field(default_factory=dict)
    used: dict[tuple, float] = field(default_factory=lambda: defaultdict(float))
    claimants: dict[tuple, list[str]] = field(default_factory=lambda: defaultdict(list))
    granted: dict[str, float] = field(default_factory=dict)  # rule -> ms over the run
    _unknown: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.sizes[()] = self.total_ms

    def claim(self, path: tuple, amount: float, rule: str) -> tuple[float, list[str]]:
        """Grant up to `amount` ms on `path`: (granted, the findings that hold the rest)."""
        room, limiter = amount, None
        for node in _prefixes(path):
            if node not in self.sizes or node in self._unknown:
                self._unknown.add(node)
                self.sizes[node] = max(self.sizes.get(node, 0.0), amount)
            left = max(0.0, self.sizes[node] - self.used[node])
            if left < room:
                room, limiter = left, node
        holders = sorted(set(self.claimants[limiter])) if limiter is not None else []
        for node in _prefixes(path):
            self.used[node] += room
            self.claimants[node].append(rule)
        self.granted[rule] = self.granted.get(rule, 0.0) + room
        return room, holders

    def summary(self) -> dict:
        attributed = self.used[()]
        return {
            "run": self.run,
            "total_ms": round(self.total_ms, 4),
            "basis": self.basis,
            "attributed_ms": round(attributed, 4),
            "by_rule": {rule: round(ms, 4) for rule, ms in self.granted.items()},
            "unexplained_ms": round(max(0.0, self.total_ms - attributed), 4),
        }

    def note(self) -> str:
        s = self.summary()
        total = s["total_ms"]
        if not total:
            return f"time ledger, {self.run}: {self.basis} is 0 ms: nothing to attribute"
        parts = ", ".join(f"{rule} {ms:.4g} ms" for rule, ms in s["by_rule"].items() if ms > 0)
        return (
            f"time ledger, {self.run}: of {self.basis} ({total:.4g} ms), the findings' costs "
            f"account for {s['attributed_ms']:.4g} ms ({s['attributed_ms'] / total:.0%}"
            + (f": {parts}" if parts else "")
            + f"); {s['unexplained_ms']:.4g} ms ({s['unexplained_ms'] / total:.0%}) is not explained "
            "by any finding (each millisecond counted once)"
        )


def _prefixes(path: tuple) -> list[tuple]:
    return [tuple(path[:i]) for i in range(len(path) + 1)]


def account_for(source: str, run: EngineRun) -> Account | None:
    """The run's ledger with the sizes its evidence gives (module docstring); None without a
    known time."""
    if run.source == "profile":
        total, basis = C.run_ms(run), "its profiled steps, each phase at its median step"
    elif run.ms_per_token and run.new_tokens:
        total, basis = run.ms_per_token * run.new_tokens, "its generation time"
    else:
        total = sum(p.total_ms for p in run.phases.values() if p.count) or None
        basis = "its phases' time"
    if not total:
        return None
    account = Account(run.name(source), total, basis)
    for phase in run.phases.values():
        if not phase.count:
            continue
        size = C.phase_ms(phase) if run.source == "profile" else phase.total_ms
        account.sizes[(phase.name,)] = size
        if phase.idle_ms is not None:
            account.sizes[(phase.name, IDLE)] = phase.idle_ms * phase.count
        if phase.collective_ms is not None:
            account.sizes[(phase.name, COLLECTIVE)] = phase.collective_ms * phase.count
    if run.collective_share is not None:
        account.sizes[(COLLECTIVE,)] = run.collective_share * total
    return account


@dataclass(frozen=True)
class _Claim:
    """A finding whose cost the ledger can settle: its run has an account, its high end a figure."""

    finding: Finding
    cost: Cost
    run: str
    total_ms: float


def _claim(finding: Finding, accounts: dict[str, Account]) -> _Claim | None:
    cost = finding.cost
    if cost is None or cost.run not in accounts or cost.total_ms is None or cost.high <= 0:
        return None
    return _Claim(finding, cost, str(cost.run), cost.total_ms)


def _order(claim: _Claim) -> tuple:
    """Surest kind first; among claims of one kind the more serious finding keeps the time (a
    cause before the symptom it explains: eager-phase before verify-ratio), then the larger."""
    cost = claim.cost
    sure = claim.total_ms * cost.low / cost.high if cost.high else 0.0
    return (
        SUREST_FIRST.index(cost.kind),
        severity_rank(claim.finding.severity),
        -sure,
        claim.finding.rule,
    )


def settle(ev: Evidence, findings: list[Finding]) -> tuple[list[Finding], list[dict]]:
    """The findings with their costs as the ledger grants them (shares of their run set), and
    each run's account (`Account.summary`, with its `note`), for the runs any cost names."""
    accounts: dict[str, Account] = {}
    for source, run in ev.all_runs():
        account = account_for(source, run)
        if account is not None:
            accounts.setdefault(account.run, account)
    priced = [c for c in (_claim(f, accounts) for f in findings) if c is not None]
    for c in priced:
        if c.cost.covers == WHOLE and c.total_ms < accounts[c.run].total_ms:
            account = accounts[c.run]
            account.total_ms = account.sizes[()] = c.total_ms
            account.basis = f"its measured difference from the baseline ({c.finding.rule})"
    settled: dict[int, Finding] = {}
    for c in sorted((c for c in priced if c.cost.covers != WHOLE), key=_order):
        f, account = c.finding, accounts[c.run]
        granted, holders = account.claim(c.cost.covers, c.total_ms, f.rule)
        cost = c.cost
        if granted < c.total_ms:
            others = [h for h in holders if h != f.rule] or [f.rule]
            cost = cost.capped(
                cost.high * granted / c.total_ms,
                f"the rest of it is time already counted under {', '.join(others)} "
                "(the time ledger counts each millisecond once)",
            )
        cost = dataclasses.replace(cost, share=granted / account.total_ms)
        settled[id(f)] = dataclasses.replace(f, cost=cost)
    for c in priced:
        if c.cost.covers == WHOLE:
            whole = accounts[c.run]
            settled[id(c.finding)] = dataclasses.replace(
                c.finding,
                cost=dataclasses.replace(c.cost, share=None),
                detail=f"{c.finding.detail} {whole.note()}.",
            )
    named = {c.run for c in priced}
    summaries = [
        {**accounts[name].summary(), "note": accounts[name].note()}
        for name in accounts
        if name in named
    ]
    return [settled.get(id(f), f) for f in findings], summaries
