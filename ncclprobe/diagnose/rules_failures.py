"""The one rule for failure lines no reader explained (`evidence.failure_lines`): every piece of
evidence diagnose read (job logs, the ranks' NCCL logs, server logs, a collect-env text) hands its
failure lines here; the known classes among them (a peer that could not be reached, a documented
CUDA or NCCL error: `evidence.nccl.nccl_failures`) are named, and the rest become one
`not-explained` finding, shown verbatim with file and line."""

from __future__ import annotations

from ncclprobe.diagnose.hang.rank_exits import all_exits
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.failure_lines import FailureLines, from_json, not_explained_finding
from ncclprobe.evidence.nccl import nccl_failure_kinds as kinds
from ncclprobe.evidence.nccl.nccl_failures import Explained, explain_lines, shm_full
from ncclprobe.findings import Finding
from ncclprobe.secrets import mask_text


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
            confidence=kind.confidence,
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


def nccl_log_kinds(ev: E.Evidence) -> list:
    """The ranks' NCCL logs' known failure classes (`evidence.nccl.nccl_failure_kinds`: topology
    detection, /dev/shm refused, InfiniBand completion errors, a network plugin's own WARN lines),
    once each across ranks, naming the ranks that showed it; the WARN lines themselves stay in
    `nccl-warn`, placed against the run."""
    seen: dict[tuple[str, str], tuple[kinds.Found, list[str]]] = {}
    for rank in ev.nccl_logs:
        found = [k for k in (kinds.topology(rank.log), kinds.shm_access(rank.log)) if k]
        found += [k for k in [shm_full(rank.log)] if k]
        found += [k for k in [kinds.ib_completion(rank.log)] if k]
        taken = {w for k in found for w in k.warnings}
        found += [k for k in kinds.net_plugins(rank.log, taken) if k.warnings]
        for k in found:
            seen.setdefault((k.kind, k.message), (k, []))[1].append(rank.label)
    return [
        Finding(
            rule=f"failure-{k.kind}",
            severity=k.severity,
            confidence=k.confidence,
            title=mask_text(k.message).split(" (", 1)[0],
            detail=f"{mask_text(k.message)} ({', '.join(labels)}). What to do: {k.fix}.",
            evidence={"kind": k.kind, "lines": k.lines, "logs": labels},
        )
        for k, labels in seen.values()
    ]


def _job_log_lines(ev: E.Evidence) -> list[FailureLines]:
    """The job logs' failure lines, less the exception of a rank that failed by itself: the hang
    reading names it with its exit (`diagnose.hang.rank_exits`)."""
    exits = all_exits(ev) if ev.job_logs else []
    said = [x.exception for x in exits if x.exception]
    if not said:
        return [log.failure_lines for log in ev.job_logs]
    out = []
    for log in ev.job_logs:
        lines = from_json(log.failure_lines.to_json())
        lines.forget(said)
        out.append(lines)
    return out


RULES = (not_explained, nccl_log_kinds)
