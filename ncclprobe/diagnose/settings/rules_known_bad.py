"""The job's NCCL is a release with a known failure on its GPUs (`nccl.known_bad`), from wherever
the evidence names a version and a GPU: the ranks' NCCL logs (their banner, nccl-tests' device
lines, NCCL's own line of the failure), a collect-env text (its NCCL and its GPUs), the run's own
record of its GPUs. An error where NCCL printed its line of the failure (it happened); a warning
where the release and the GPUs match a row (it can happen here)."""

from __future__ import annotations

from ncclprobe.diagnose.rules_machines import one_machine
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.machines import nccl_log_groups
from ncclprobe.evidence.nccl.known_bad_scan import known_bad_in_logs, scan
from ncclprobe.findings import Finding, NotChecked, RuledOut
from ncclprobe.nccl.known_bad import ROWS, Match, capability_of, describe, matching

RULE = "known-bad-nccl"
HYPOTHESIS = "the job runs an NCCL release with a known failure on its GPUs"


def known_bad_findings(ev: E.Evidence) -> list:
    """The job's NCCL is what its ranks' logs say they loaded; a collect-env text's NCCL (its
    shell's, maybe another install) stands for it only where no log names one. The GPUs of other
    sources join the logs' only where the inputs describe one machine (`rules_machines`)."""
    base, host_arch = _gpus(ev) if one_machine(ev) else (set(), None)
    caps = set(base)
    found: dict[tuple[str, str], tuple[Match, list[str]]] = {}
    versions: set[str] = set()
    for group in nccl_log_groups(ev.nccl_logs):  # each machine's logs with its own GPUs only
        mine = base | scan([rank_log.path for rank_log in group]).capabilities
        caps |= mine
        for rank_log in group:
            if rank_log.log.nccl_version:
                versions.add(rank_log.log.nccl_version)
            matches, _ = known_bad_in_logs([rank_log.path], rank_log.log, mine, host_arch)
            for match in matches:
                _add(found, match, rank_log.label)
    collected = ev.collect_env.nccl_version if ev.collect_env and not versions else None
    if collected and ev.collect_env is not None:
        if not one_machine(ev):  # the collect-env's release, with its own GPUs only
            caps, host_arch = _collected_gpus(ev)
        versions.add(collected)
        for match in matching(collected, caps, host_arch=host_arch):
            _add(found, match, f"{ev.collect_env.tool} text")
    out: list = [_finding(match, where, caps) for match, where in found.values()]
    if out or not versions:
        return out
    release = f"NCCL {', '.join(sorted(versions))}"
    if ev.nccl_logs and all(rank_log.log.library == "RCCL" for rank_log in ev.nccl_logs):
        return [
            RuledOut(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                reason=f"the job's library is RCCL ({release} is the NCCL release it follows): "
                f"the {len(ROWS)} known-bad rows are NVIDIA NCCL's own failures",
            )
        ]
    named = ev.collect_env.gpu_names if ev.collect_env is not None and one_machine(ev) else ()
    if not caps and named:
        return [
            NotChecked(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                missing=f"the compute capability of {', '.join(named[:4])} (named by the "
                f"{ev.collect_env.tool if ev.collect_env else ''} text): no NVIDIA capability is "
                "known for that name here, and some known-bad rows apply to some GPUs only",
            )
        ]
    if not caps:
        specific = sum(1 for row in ROWS if row.capabilities is not None or row.host_arch)
        return [
            NotChecked(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                missing=f"which GPUs the job ran on: {specific} of the {len(ROWS)} known-bad rows "
                f"apply to some GPUs or hosts only ({release} matches none of the others); a collect-env "
                "text (--collect-env) or nccl-tests' device lines name them",
            )
        ]
    gpus = ", ".join(f"{c // 10}.{c % 10}" for c in sorted(caps))
    return [
        RuledOut(
            rule=RULE,
            hypothesis=HYPOTHESIS,
            reason=f"{release} with GPU compute capability {gpus}"
            + (f" on {host_arch}" if host_arch else "")
            + f" falls in none of the {len(ROWS)} known-bad rows",
        )
    ]


def _gpus(ev: E.Evidence) -> tuple[set[int], str | None]:
    caps, host_arch = _collected_gpus(ev)
    return caps | (set(ev.node.compute_capabilities or ()) if ev.node else set()), host_arch


def _collected_gpus(ev: E.Evidence) -> tuple[set[int], str | None]:
    if ev.collect_env is None:
        return set(), None
    caps = set(ev.collect_env.compute_capabilities)
    caps |= {c for c in map(capability_of, ev.collect_env.gpu_names) if c is not None}
    return caps, ev.collect_env.host_arch


def _add(found: dict, match: Match, where: str) -> None:
    key = (match.row.key, match.version)
    if key in found:
        earlier, places = found[key]
        if match.seen and not earlier.seen:
            found[key] = (match, places)
        places.append(where)
    else:
        found[key] = (match, [where])


def _finding(match: Match, where: list[str], caps: set[int]) -> Finding:
    row = match.row
    return Finding(
        rule=RULE,
        severity=match.severity,
        confidence="high" if match.seen or row.capabilities is None or caps else "medium",
        title=f"NCCL {match.version} "
        + (
            "failed as a known-bad release does"
            if match.seen
            else f"falls in a known issue's range ({row.condition})"
            if row.conditional
            else "is a known-bad release on these GPUs"
        )
        + f": {row.failure.split(':')[0]}; {row.remedy()}",
        detail=describe(match) + f" Seen in: {', '.join(dict.fromkeys(where))}.",
        evidence={
            "row": row.key,
            "version": match.version,
            "first_bad": row.first_bad,
            "fixed_in": row.fixed_in,
            "works_in": row.works_in,
            "capabilities": sorted(caps),
            "failure_seen": match.seen,
            "sources": list(row.sources),
        },
        next_command=f"# {row.workaround}",
    )


def nccl_log_findings(ev: E.Evidence) -> list[Finding]:
    """`nccl-log`: the rows the one log falls in, from its version, and from the GPUs and NCCL's own
    lines of a failure its files (`ev.inputs["nccl_log"]`, where given) hold."""
    if ev.nccl_log is None:
        return []
    matches, scanned = known_bad_in_logs(ev.inputs.get("nccl_log", ()), ev.nccl_log)
    return [_finding(m, ["the NCCL log"], scanned.capabilities) for m in matches]


RULES = (known_bad_findings,)
