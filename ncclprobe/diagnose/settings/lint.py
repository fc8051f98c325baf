"""The settings rule set: the knowledge table's lint (`ncclprobe.nccl.lint`) over a set of NCCL
settings, as `knobs --lint` runs it (this environment, or a collect-env text) and `nccl-log` over
what NCCL said it read. A lint error (a value NCCL ignores or rejects, or one that can corrupt
data) fails the verdict; warnings and notes do not.
"""

from __future__ import annotations

from ncclprobe.diagnose.report import Report, RuleSet, Table, judge
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.lint_finding import SettingFinding
from ncclprobe.secrets import mask_env, mask_text


def lint_findings(ev: Evidence) -> list[SettingFinding]:
    settings = ev.settings
    if settings is None:  # the rule set needs them (`LINT`)
        return []
    return lint_env(settings.env, node=settings.node, nccl_version=settings.nccl_version)


LINT = RuleSet("settings lint", (lint_findings,), needs=("settings",))


def masked(finding: SettingFinding) -> dict:
    """A lint finding's JSON with its message and fix masked (they quote the values they judge)."""
    return {
        **finding.to_json(),
        "message": mask_text(finding.message),
        "fix": mask_text(finding.fix),
    }


def lint_report(ev: Evidence) -> Report:
    """`knobs --lint`: the settings rule set over the gathered settings, one table of findings."""
    settings = ev.settings
    if settings is None:
        raise ValueError("knobs --lint judges gathered settings (gather.settings)")
    report = judge(ev, (LINT,), kind="lint", fails_at="error", notes=list(settings.notes))
    found = [f for f in report.findings if isinstance(f, SettingFinding)]  # the LINT set's: all
    report.rows = [
        {
            "severity": f.severity,
            "variable": f.variable,
            "finding": mask_text(f.message),
            "fix": mask_text(f.fix),
        }
        for f in found
    ]
    report.document = {
        "schema_version": 1,
        "env": mask_env(settings.env),
        "node": settings.node.to_json() if settings.node else None,
        "nccl_version": settings.nccl_version,
        "source": settings.source,
        "notes": report.notes,
        "findings": [masked(f) for f in found],
    }
    title = (
        f"lint of {len(settings.env)} NCCL variable(s) from {settings.source}: "
        f"{len(report.findings)} finding(s)"
    )
    report.sections = [Table(report.rows, title=title, notes=report.notes)]
    return report
