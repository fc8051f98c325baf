"""What an `ncclprobe env-check --format json` document says about the live job, cause first.

A worker that lacks a setting its siblings have is the finding that explains the others: the
workers of one job are started alike, so one without the setting was started another way, and the
usual ways are few (named in the finding). The launcher itself often shows the setting missing in
/proc although it set it in-process (os.environ) before starting the workers: /proc holds the
environment a process was exec'd with, so that is a caveat about the evidence, not a problem,
whenever its children have the value. Nothing is ruled out from processes env-check could not read.
"""

from __future__ import annotations

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.live.env_check_document import (
    KIND,
    CheckedProcess,
    EnvCheckDocument,
    ExpectationStatus,
)
from ncclprobe.findings import Finding, NotChecked, Outcome, RuledOut
from ncclprobe.nccl.recipes import only_shapes_the_log

RULE = "env-check"
HYPOTHESIS = "settings never reached the job's processes"
MECHANISMS = {
    "forkserver worker": "it was forked from a multiprocessing forkserver (or a pool) started before the launcher "
    "set the variable: forked children inherit the forkserver's environment, not the launcher's",
    "forked child": "it was forked from a process that did not have the variable yet (a pool or worker started "
    "earlier): a fork copies the parent's environment as it was then",
}
DEFAULT_MECHANISM = (
    "it was started before the launcher set the variable, or by a launcher step that builds the "
    "environment anew (an allow-list of variables, `env -i`, a container or ssh boundary)"
)


def env_check_findings(ev: E.Evidence) -> list:
    doc = ev.env_check
    if doc is None:
        return []
    if doc.kind != KIND:
        return [
            NotChecked(
                rule=RULE,
                hypothesis="settings reached the job's processes",
                missing=f"{ev.env_check_path} is not `ncclprobe env-check --format json` output",
            )
        ]
    processes = list(doc.processes)
    checked = set(doc.checked_pids)
    targets = [p for p in processes if p.pid in checked and p.readable and p.env is not None]
    if not targets:
        return [
            NotChecked(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                missing=f"env-check read {len(targets)} of the job's processes ({len(processes)} found): "
                "nothing can be ruled out from processes it could not read",
                next_command=_again(doc),
            )
        ]
    out: list[Outcome] = [
        *_lacking_siblings(doc, targets),
        *_launcher_caveats(processes, targets),
    ]
    rest = [f for f in doc.findings if not _explained(f, out)]
    if rest:
        out.append(
            Finding(
                rule=RULE,
                severity="error",
                confidence="high",
                title=f"env-check: {rest[0]}"
                + (f" (and {len(rest) - 1} more)" if len(rest) > 1 else ""),
                detail="In the live job, processes that create NCCL communicators lack expected settings "
                "or NCCL read other values.",
                evidence={"findings": rest, "checked_pids": sorted(checked)},
                next_command=_again(doc),
            )
        )
    if not any(isinstance(o, Finding) and o.severity != "info" for o in out):
        if not doc.expectations:  # nothing was expected: nothing can have been missed
            out.append(
                NotChecked(
                    rule=RULE,
                    hypothesis=HYPOTHESIS,
                    missing=f"the settings the job should have: env-check read {len(targets)} process(es) "
                    "but was given no expectation (--expect VAR=VALUE, --expect-from FILE)",
                    next_command=_again(doc),
                )
            )
            return out
        out.append(
            RuledOut(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                reason=f"env-check read {len(targets)} process(es) that create NCCL communicators "
                f"(pids {', '.join(str(p.pid) for p in targets)}) and found every expectation met",
            )
        )
    return out


def _lacking_siblings(doc: EnvCheckDocument, targets: list[CheckedProcess]) -> list[Finding]:
    """Per NCCL variable that some workers of one parent have and others lack: the lacking ones,
    with the likely mechanism."""
    out = []
    families: dict = {}
    for proc in targets:
        families.setdefault(proc.ppid, []).append(proc)
    for family in (f for f in families.values() if len(f) > 1):
        out += _lacking_in_family(doc, family)
    return out


def _lacking_in_family(doc: EnvCheckDocument, targets: list[CheckedProcess]) -> list[Finding]:
    out = []
    env = {p.pid: p.env or {} for p in targets}  # targets were read (env_check_findings)
    for variable in sorted({k for p in targets for k in env[p.pid] if k.startswith("NCCL_")}):
        have = [p for p in targets if variable in env[p.pid]]
        lack = [p for p in targets if variable not in env[p.pid] and not p.empty_block]
        if not have or not lack:
            continue
        value = env[have[0].pid][variable]
        mechanism = MECHANISMS.get(lack[0].role or "", DEFAULT_MECHANISM)
        pids = ", ".join(f"{p.pid} ({p.role or 'process'})" for p in lack)
        log_only = only_shapes_the_log(variable)
        effect = (
            f"{variable} changes only what NCCL logs, never what it does: that worker's collectives "
            "are the same, but its NCCL log is not the others' (a missing log or subsystem there is "
            "this, not a failure)"
            if log_only
            else f"NCCL in that worker runs with its default for {variable} while the others run with "
            f"{value}: where {variable} shapes what NCCL does, the ranks of one communicator no longer "
            "agree on it"
        )
        out.append(
            Finding(
                rule="env-check-sibling",
                severity="info" if log_only else "error",
                confidence="high",
                title=(
                    f"{len(lack)} of {len(targets)} workers lack {variable}={value} that the others "
                    f"have (pid {pids})"
                ),
                detail=(
                    f"The job's workers are started alike, yet pid {lack[0].pid} has no {variable} while pids "
                    f"{', '.join(str(p.pid) for p in have)} have {variable}={value}. Likely: {mechanism}. "
                    f"{effect}."
                ),
                evidence={
                    "variable": variable,
                    "value": value,
                    "lacking_pids": [p.pid for p in lack],
                    "having_pids": [p.pid for p in have],
                    "roles": {p.pid: p.role for p in lack},
                    "forked_from": {p.pid: p.forked_from for p in lack if p.forked_from},
                },
                next_command=f"{_again(doc, variable, value)}  # after setting {variable} before the "
                "launcher starts any "
                "worker or pool",
            )
        )
    return out


def _launcher_caveats(
    processes: list[CheckedProcess], targets: list[CheckedProcess]
) -> list[Finding]:
    """Expectations a launcher misses in /proc while workers it started have them."""
    out = []
    for proc in processes:
        if not proc.readable:
            continue
        children = [p for p in targets if p.ppid == proc.pid]
        missing = [
            c.variable
            for c in proc.checks
            if c.status == ExpectationStatus.MISSING
            and children
            and any(c.variable in (p.env or {}) for p in children)
        ]
        if missing:
            out.append(
                Finding(
                    rule="env-check-launcher",
                    severity="info",
                    confidence="high",
                    title=f"the launcher (pid {proc.pid}) shows no {', '.join(missing)} in /proc, its "
                    "workers have it",
                    detail=(
                        "/proc/PID/environ is the environment a process was exec'd with: a launcher that sets the "
                        "variable in-process (os.environ) before starting its workers shows it missing there while "
                        "the workers receive it. A caveat about the evidence, not a problem."
                    ),
                    evidence={"pid": proc.pid, "variables": missing},
                )
            )
    return out


def _explained(text: str, found: list[Outcome]) -> bool:
    """env-check's own finding lines that the findings above already explain (same pid)."""
    pids: set[int] = set()
    for f in found:
        if isinstance(f, Finding):
            pids.update(f.evidence.get("lacking_pids") or [])
            if f.rule == "env-check-launcher":
                pids.add(f.evidence["pid"])
    return any(text.startswith(f"pid {pid}:") for pid in pids)


def _again(doc: EnvCheckDocument, variable: str | None = None, value: str | None = None) -> str:
    expect = f" --expect {variable}={value}" if variable else ""
    return f"ncclprobe env-check --pid {doc.root_pid}{expect}  # add --log FILE: the job's NCCL_DEBUG=INFO log"


RULES = (env_check_findings,)
