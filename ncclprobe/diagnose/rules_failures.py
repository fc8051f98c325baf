"""The one rule for failure lines no reader explained (`evidence.failure_lines`): every piece of
evidence diagnose read (job logs, the ranks' NCCL logs, server logs, a collect-env text) hands its
unexplained failure lines to one `not-explained` finding, shown verbatim with file and line."""

from __future__ import annotations

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.failure_lines import not_explained_finding


def not_explained(ev: E.Evidence) -> list:
    sources = [log.failure_lines for log in ev.job_logs]
    sources += [rank.log.failure_lines for rank in ev.nccl_logs]
    sources += [
        run.log.failure_lines
        for run in [*ev.runs, *ev.baseline]
        if getattr(run, "log", None) is not None and getattr(run.log, "failure_lines", None)
    ]
    if ev.collect_env is not None and getattr(ev.collect_env, "failure_lines", None):
        sources.append(ev.collect_env.failure_lines)
    finding = not_explained_finding(sources)
    return [finding] if finding else []


RULES = (not_explained,)
