"""The one rule for failure lines no reader explained (`evidence.failure_lines`): every piece of
evidence diagnose read (job logs, the ranks' NCCL logs, server logs, a collect-env text) hands its
failure lines here; the known classes among them (a peer that could not be reached, a documented
CUDA or NCCL error: `evidence.nccl.nccl_failures`) are named, and the rest become one
`not-explained` finding, shown verbatim with file and line."""

from __future__ import annotations

from ncclprobe.diagnose.hang.rank_exits import own_exits
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.failure_lines import FailureLines, from_json, not_explained_finding
from ncclprobe.evidence.nccl.nccl_failures import Explained, explain_lines
from ncclprobe.findings import Finding


def not_explained(ev: E.Evidence) -> list:
    sources = _job_log_lines(ev)
    sources += [rank.log.failure_lines for rank in ev.nccl_logs]
    sources += [
        from_json(run.log["not_explained"])
        for run in [*ev.runs, *ev.baseline]
        if isinstance(run.log, dict) and run.log.get("not_explained")
    ]
    if ev.collect_env is not None and getattr(ev.collect_env, "failure_lines", None):
        sources.append(ev.collect_env.failure_lines)
    known: dict[tuple[str, str], Explained] = {}
    for source in sources:
        for kind in explain_lines(source):
            known.setdefault((kind.kind, kind.message), kind)
    out: list = [
        Finding(
            rule=f"failure-{kind.kind}",
            severity=kind.severity,
            confidence="high",
            title=kind.message.split(": ", 1)[0]
            if kind.kind == "known-error"
            else kind.message.split(" (", 1)[0],
            detail=f"{kind.message}. What to do: {kind.fix}.",
            evidence={"kind": kind.kind, "lines": kind.lines},
        )
        for kind in known.values()
    ]
    finding = not_explained_finding(sources)
    return out + ([finding] if finding else [])


def _job_log_lines(ev: E.Evidence) -> list[FailureLines]:
    """The job logs' failure lines, less the exception of a rank that failed by itself: the hang
    reading names it with its exit (`diagnose.hang.rank_exits`)."""
    exits = own_exits(ev) if ev.job_logs else {}
    said = [x.exception for x in exits.values() if x.exception]
    if not said:
        return [log.failure_lines for log in ev.job_logs]
    out = []
    for log in ev.job_logs:
        lines = from_json(log.failure_lines.to_json())
        lines.forget(said)
        out.append(lines)
    return out


RULES = (not_explained,)
