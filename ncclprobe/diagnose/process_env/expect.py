"""What a job's processes should have: `--expect NAME=VALUE`, `--expect-from` a recommendation
file (read into `Expectation`s, `ncclprobe.evidence.live.processes`), each judged against what a
process really has, and the knowledge table's lint over it.

A recommendation file is what `ncclprobe recommend --emit json` writes:
`{"schema_version": 1, "kind": "recommendation", "env": {"NCCL_PROTO": "LL", ...}, ...}`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live.env_check_document import ExpectationStatus
from ncclprobe.evidence.live.logcheck import normalise
from ncclprobe.evidence.live.processes import Expectation
from ncclprobe.nccl.lint import lint_env
from ncclprobe.secrets import display_value, is_relevant, mask_text

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ExpectationCheck:
    """One expectation against what a process has: met or not (not a finding; the report decides)."""

    variable: str
    expected: str
    actual: str | None
    status: ExpectationStatus  # unknown: the /proc environment block was empty
    source: str = "/proc"  # where `actual` comes from: "/proc" or "NCCL log" (what NCCL read)

    def to_json(self) -> dict:
        return {
            "variable": self.variable,
            "expected": display_value(self.variable, self.expected),
            "actual": display_value(self.variable, self.actual),
            "status": self.status,
            "source": self.source,
        }


def parse_expect(items: Iterable[str]) -> list[Expectation]:
    """`NAME=VALUE` strings from the command line; an empty VALUE expects the variable set empty."""
    parsed = []
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name):
            shown = (
                display_value(name, name) if name else "''"
            )  # a mistyped secret stays masked here too
            raise UsageProblem(
                f"--expect {shown!r} is not NAME=VALUE (for example --expect NCCL_PROTO=LL)"
            )
        parsed.append(Expectation(name, value, "--expect"))
    return parsed


def load_recommendation(path: str | Path) -> list[Expectation]:
    """The `env` of a recommendation file as expectations (`ncclprobe.evidence.recommendation_file`, the one loader)."""
    from ncclprobe.evidence.recommendation_file import recommended_env

    return [
        Expectation(name, value, str(path))
        for name, value in recommended_env(path, "--expect-from").items()
    ]


def check(
    env: Mapping[str, str],
    expectations: Iterable[Expectation],
    nccl_read: Mapping[str, str] | None = None,
) -> list[ExpectationCheck]:
    """Each expectation against the process: what NCCL reported reading wins over /proc, because
    /proc can't show values the process set itself after exec."""
    checks = []
    for item in expectations:
        actual: str | None
        if nccl_read and item.variable in nccl_read:
            actual, source = nccl_read[item.variable], "NCCL log"
            same = normalise(item.variable, actual) == normalise(item.variable, item.value)
        else:
            actual, source = env.get(item.variable), "/proc"
            same = actual == item.value
        status = (
            ExpectationStatus.MISSING
            if actual is None
            else (ExpectationStatus.OK if same else ExpectationStatus.DIFFERENT)
        )
        if status is ExpectationStatus.MISSING and source == "/proc" and not env:
            status = (
                ExpectationStatus.UNKNOWN
            )  # an empty block says nothing about what the process holds
        checks.append(ExpectationCheck(item.variable, item.value, actual, status, source))
    return checks


def lint(env: Mapping[str, str], nccl_version: str | None = None) -> list[dict]:
    """The knowledge table's lint over a process's NCCL settings."""
    settings = {name: value for name, value in env.items() if is_relevant(name)}
    findings = lint_env(settings, nccl_version=nccl_version)
    return [
        {
            "severity": f.severity,
            "variable": f.variable,
            "code": getattr(f, "code", ""),
            "message": _masked(f.message, settings),
            "fix": _masked(f.fix, settings),
        }
        for f in findings
    ]


def _masked(text: str, settings: Mapping[str, str]) -> str:
    """Lint messages quote the values they judge (only `settings`); none may carry a secret."""
    for name, value in settings.items():
        shown = display_value(name, value)
        if value and shown != value:
            for form in (value, repr(value)[1:-1]):  # as written, and as `{value!r}` quotes it
                text = text.replace(form, shown)
    return mask_text(text)
