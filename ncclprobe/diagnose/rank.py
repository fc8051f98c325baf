"""`ncclprobe diagnose`: every rule set whose evidence is present, run over the bundle, as one Report.

The rule sets are data (`RuleSet`: rules and the evidence they need), in the order their outcomes
are listed: the settings every environment is judged by, what an env-check document says, the
engine run's time (needs a run: a hang's evidence comes without), the hang. `judge`
(`diagnose.report`) runs them and ranks the findings; this module adds what diagnose prints beside
them: how the expected verify/decode ratio was derived, each run's steps, each process group's
progress, and the JSON document of schema `diagnosis` v2 (2: each finding's `cost`,
`findings.Cost`, replaced cost_ms_per_token/step; each run's time ledger under `ledger`). Before
ranking, every cost is priced by its run's time ledger (`diagnose.run.ledger`): each millisecond of
a run goes to at most one finding, so the ranked costs never add past the run.
"""

from __future__ import annotations

import os.path

from ncclprobe.diagnose import rules_failures, rules_machines
from ncclprobe.diagnose.hang import rules_arrival, rules_hang, rules_nccl_log, rules_stacks
from ncclprobe.diagnose.p2p.check import P2P, check_report
from ncclprobe.diagnose.process_env import rules_capture, rules_envcheck
from ncclprobe.diagnose.process_env.check import PROCESS_ENV, env_check_report
from ncclprobe.diagnose.report import FINDINGS, Lines, Report, RuleSet, judge
from ncclprobe.diagnose.run import (
    ledger,
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
from ncclprobe.evidence.run.view import EngineRun
from ncclprobe.findings import Finding
from ncclprobe.rank_ranges import rank_word

SCHEMA_VERSION = 2  # 2: each finding's `cost` (findings.Cost) replaced cost_ms_per_token/step
# whether the inputs describe one machine: said first, before any rule joins their facts
MACHINES = RuleSet("machines", rules_machines.RULES)
SETTINGS = RuleSet("settings", (rules_safety.unsafe_settings,) + rules_settings.RULES)
# the job's NCCL release against the known-bad table, wherever a version is read
KNOWN_BAD = RuleSet(
    "known-bad NCCL releases", rules_known_bad.RULES, needs=("nccl_logs", "collect_env")
)
ENV_CHECK_DOCUMENT = RuleSet("env-check document", rules_envcheck.RULES)
# what `ncclprobe capture` saw of the job's processes: settings that never reached a worker
CAPTURE = RuleSet("capture", rules_capture.RULES, needs=("capture",))
# rules about an engine run: they need one (a hang's evidence comes without)
ENGINE_RUN = RuleSet(
    "engine run",
    rules.RULES
    + rules_draft.RULES
    + rules_profile.RULES
    + rules_host.RULES
    + rules_log.RULES
    + rules_spec_config.RULES
    + rules_nccl_run.RULES,
    needs=("runs", "baseline"),
)
HANG = RuleSet(
    "hang", rules_hang.RULES + rules_arrival.RULES + rules_stacks.RULES + rules_nccl_log.RULES
)
# every reader's failure lines: the known classes named, the rest shown as not explained
FAILURE_LINES = RuleSet("failure lines", rules_failures.RULES)
# the live ones run where this machine's evidence was gathered (diagnose --topo-check, --env-check PID)
RULE_SETS = (
    MACHINES,
    SETTINGS,
    KNOWN_BAD,
    ENV_CHECK_DOCUMENT,
    CAPTURE,
    PROCESS_ENV,
    ENGINE_RUN,
    HANG,
    FAILURE_LINES,
    P2P,
)


def diagnose(ev: Evidence, rule_sets: tuple[RuleSet, ...] = RULE_SETS) -> Report:
    """Every rule set whose evidence is present, ranked, with what diagnose prints beside them."""
    expectation = expected_verify_ratio(ev.config)
    accounts: list[dict] = []

    def price(findings: list[Finding]) -> list[Finding]:
        """Each cost as its run's time ledger grants it (each millisecond counted once)."""
        priced, settled = ledger.settle(ev, findings)
        accounts.extend(settled)
        return priced

    report = judge(
        ev,
        rule_sets,
        kind="diagnosis",
        price=price,
        inputs={k: v for k, v in ev.inputs.items() if v},
        data={"expected_verify": expectation.to_json() if expectation else None},
    )
    report.notes = list(ev.notes) + rules_hang.notes(ev) + [a["note"] for a in accounts]
    groups = _groups(ev)
    head = [f"# diagnosis of {_inputs(report.inputs)}"]
    head += _expectation_lines(report.expectation)
    head += _step_lines(ev) if ev.kind != "engine-trace" else []
    head += _group_lines(groups) if groups is not None else []
    report.sections = [Lines(head + [f"# note: {note}" for note in report.notes]), FINDINGS]
    live = _live(ev)
    files = ev.runs or ev.baseline or ev.flight_recorder or ev.job_logs or ev.nccl_logs
    report.answered = bool(files or ev.env_check or ev.collect_env) or all(r.answered for r in live)
    report.sections += [section for r in live for section in r.data.get("beside", r.sections)]
    report.rows = [_row(i, f) for i, f in enumerate(report.findings, 1)]
    report.document = {
        "schema_version": SCHEMA_VERSION,
        "kind": "diagnosis",
        "evidence_kind": ev.kind,
        "inputs": report.inputs,
        "expected_verify": report.expectation,
        "notes": report.notes,
        "ledger": accounts,
        "findings": [Finding.to_json(f) for f in report.findings],
        "ruled_out": [r.to_json() for r in report.ruled_out],
        "not_checked": [n.to_json() for n in report.not_checked],
        "runs": [run_summary(src, run) for src, run in ev.all_runs()],
    }
    if groups is not None:
        report.document["process_groups"] = groups
    report.document.update({r.kind.replace("-", "_"): r.to_json() for r in live})
    return report


def _live(ev: Evidence) -> list[Report]:
    """The reports of this machine's evidence (env-check's, topo --check's), for what diagnose
    prints beside its findings: their tables and text (not their findings: those are diagnose's
    own), and their documents under their kinds."""
    reports = []
    if ev.processes:
        reports.append(env_check_report(Evidence(processes=ev.processes)))
    if ev.p2p:
        reports.append(check_report(Evidence(p2p=ev.p2p)))
    return reports


def _groups(ev: Evidence) -> list[dict] | None:
    if not ev.flight_recorder:
        return None
    from ncclprobe.diagnose.hang.hang import groups_summary

    return groups_summary(ev.flight_recorder)


def _row(index: int, finding: Finding) -> dict:
    return {
        "rank": index,
        "severity": finding.severity,
        "confidence": finding.confidence,
        "rule": finding.rule,
        "cost": finding.cost.header() if finding.cost else None,
        "cost_kind": finding.cost.kind if finding.cost else None,
        "finding": finding.title,
        "next_command": finding.next_command,
    }


def run_summary(source: str, run: EngineRun) -> dict:
    """A run of the view, for --format json: its phases and what could not be known."""
    return {
        "input": source,
        "label": run.label,
        "mode": run.mode,
        "source": run.source,
        "engine": run.engine,
        "path": run.path,
        "phases": {name: p.to_json() for name, p in run.phases.items()},
        "collective_share": run.collective_share,
        "graph_coverage": run.graph_coverage,
        "acceptance": run.acceptance.__dict__ if run.acceptance else None,
        "rank_count": len(run.ranks) or None,
        "ranks": run.ranks,
        "log": run.log,
        "notes": run.notes,
    }


def _inputs(inputs: dict) -> str:
    parts = []
    for key, value in inputs.items():
        if value:
            names = value if isinstance(value, list) else [value]
            if len(names) > 4:  # a many-rank job: its folder and the count, not every file
                folder = os.path.commonpath([os.path.dirname(str(n)) for n in names]) or "."
                first, last = os.path.basename(str(names[0])), os.path.basename(str(names[-1]))
                names = [f"{len(names)} files in {folder} ({first} ... {last})"]
            parts.append(f"{key.replace('_', ' ')} " + ", ".join(map(str, names)))
    return "; ".join(parts) or "nothing"


def _step_lines(ev: Evidence) -> list[str]:
    """Per run and phase: steps, time per step, GPU busy and idle, graph share, launches."""
    lines = []
    for source, run in ev.all_runs():
        if len(run.ranks) > 1:  # a job's profiles, one per rank: say how many were read
            numbers = [r["rank"] for r in run.ranks if isinstance(r.get("rank"), int)]
            lines.append(
                f"# {run.name(source)}: {len(run.ranks)} ranks read, one profile each"
                + (f" ({rank_word(numbers)})" if len(numbers) == len(run.ranks) else "")
            )
        for p in run.phases.values():
            if not p.count:
                continue
            gpu = (
                f", GPU busy {_ms(p.device_ms)} ms, idle {_ms(p.idle_ms)} ms"
                if p.device_ms is not None
                else ", no GPU events"
            )
            graph = f", graph {p.graph_share:.0%}" if p.graph_share is not None else ""
            launches = ", ".join(f"{k} {v:g}" for k, v in p.launches.items())
            tokens = f", {p.tokens_per_seq:g} tok/seq" if p.tokens_per_seq else ""
            batch = f", batch {p.batch}" if p.batch else ""
            lines.append(
                f"# {run.name(source)}: {p.name} x{p.count}: {_ms(p.median_ms)} ms/step{gpu}{graph}"
                f"{tokens}{batch}" + (f"; launches per step: {launches}" if launches else "")
            )
    return lines


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f}"


def _group_lines(groups: list[dict]) -> list[str]:
    """Per process group (one line per kind of group at scale): where each rank got, as ranges."""
    from ncclprobe.diagnose.hang.hang_words import group_lines

    return group_lines(groups)


def _expectation_lines(exp: dict | None) -> list[str]:
    """How the expected verify/decode ratio was derived (see ncclprobe.diagnose.run.expectations)."""
    if not exp:
        return []

    def mb(parts: dict) -> str:
        return ", ".join(f"{k} {v / 1e6:.3g} MB" for k, v in parts.items())

    lines = [
        f"# expected verify/decode {exp['expected_ratio']:.2f}x = bytes moved by a verify step / by a decode step "
        f"(weight-bandwidth bound); flagged above {exp['limit_ratio']:.2f}x",
        f"#   decode: {mb(exp['decode_bytes'])}",
        f"#   verify: {mb(exp['verify_bytes'])}",
    ]
    return lines + [f"#   assumed: {a}" for a in exp.get("assumptions") or []]
