"""env-check across hosts judged: every host's processes of the job side by side, and the settings
that are not the same on every host named with their hosts.

The evidence is `evidence.live.host_env_checks.HostsEnvEvidence` (gathered by `gather.hosts`: one
env-check document per root of the job on each host). On each host, the processes that matter are
env-check's own (those with libnccl mapped, else every readable one: each document's
`checked_pids`); a host's value of a variable is the set of values its processes have (unset where
one lacks it). The rules (`HOSTS_ENV`, each a function of the evidence returning findings):

  hosts-setting-differs  a variable whose value is not the same on every host that has the job
                         (one missing on a host counts): an error for the NCCL variables that must
                         agree across a job, a warning for those a host may set for its own
                         hardware (`HOST_LOCAL`) and for every other variable shown
  hosts-expectation      an --expect missed on some hosts, the hosts named (env-check's own check on
                         each host, grouped across hosts)
  hosts-lint             a lint error on some hosts (grouped the same way)
  hosts-no-job           hosts where the agent found no process of the job
  hosts-not-checked      hosts expected and never reported (the agent failed there, or its launch)

Variables that are per process by design (a rank's number, torchrun's error file) are never
compared. Values are shown under the one masking policy. Hosts are written as a Slurm hostlist.
`hosts_report` runs the rule set (`HOSTS_ENV`, over `evidence.bundle.Evidence.hosts`) through the
one `judge` into the one Report its renderer prints.
"""

from __future__ import annotations

from ncclprobe.diagnose.report import FINDINGS, Lines, Report, RuleSet, Table, judge
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.live.env_check_document import CheckedProcess, ExpectationStatus
from ncclprobe.evidence.live.host_env_checks import HostCheck, HostsEnvEvidence
from ncclprobe.findings import Finding
from ncclprobe.hosts.hostlist import compress
from ncclprobe.secrets import display_value, is_relevant

# differ between the processes of one job by design: never compared across hosts
PER_PROCESS = frozenset(
    {"RANK", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_ERROR_FILE", "NCCL_DEBUG_FILE"}
)
# NCCL variables a host may set for its own hardware (which NIC, which HCA, its topology file):
# a difference is worth a look, not a fault
HOST_LOCAL = frozenset(
    {
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_TOPO_FILE",
        "NCCL_TOPO_DUMP_FILE",
        "NCCL_GRAPH_DUMP_FILE",
        "NCCL_HOSTID",
        "NCCL_NET_PLUGIN",
    }
)
UNSET = None


def targets(check: HostCheck) -> list[CheckedProcess]:
    """A host's processes that matter: env-check's verdict's, live and readable."""
    out = []
    for doc in check.documents:
        chosen = doc.checked_pids or {p.pid for p in doc.processes}
        out += [p for p in doc.processes if p.pid in chosen and p.readable and p.env is not None]
    return out


def host_values(check: HostCheck) -> dict[str, frozenset]:
    """variable -> the values its processes have there (UNSET where one lacks it)."""
    procs = targets(check)
    envs = [p.env or {} for p in procs]  # targets: processes read
    names = {name for env in envs for name in env if is_relevant(name)} - PER_PROCESS
    return {name: frozenset(env.get(name, UNSET) for env in envs) for name in names}


def _of(evidence: Evidence) -> HostsEnvEvidence:
    """The rule set's evidence (`HOSTS_ENV` needs it: it runs only where it was gathered)."""
    if evidence.hosts is None:
        raise ValueError("the rules across hosts judge gathered node documents (gather.hosts)")
    return evidence.hosts


def setting_differs(evidence: Evidence) -> list[Finding]:
    checked = [c for c in _of(evidence).checks if targets(c)]
    values = {c.host: host_values(c) for c in checked}
    names = sorted({name for v in values.values() for name in v})
    found = []
    for name in names:
        by_value: dict[frozenset, list[str]] = {}
        for host in sorted(values):
            by_value.setdefault(values[host].get(name, frozenset({UNSET})), []).append(host)
        if len(by_value) > 1:
            found.append(_differs(name, by_value, len(checked)))
    return found


def _differs(name: str, by_value: dict[frozenset, list[str]], hosts: int) -> Finding:
    missing = frozenset({UNSET})
    shown = sorted(
        by_value.items(), key=lambda item: (item[0] != missing, -len(item[1]), item[1][0])
    )
    parts = [
        f"{'missing' if value == missing else _value_text(name, value)} on {compress(where)}"
        for value, where in shown
    ]
    head = f"{name} " if missing in by_value else f"{name} differs between hosts: "
    must_agree = name.startswith("NCCL_") and name not in HOST_LOCAL
    return Finding(
        rule="hosts-setting-differs",
        severity="error" if must_agree else "warning",
        confidence="high",
        title=head + "; ".join(parts),
        detail=(
            f"The job's processes do not have the same {name} on all {hosts} hosts"
            + (
                ": NCCL reads it on every rank, and ranks that disagree on it can pick different "
                "protocols, buffers or transports for one communicator (a hang or an error)."
                if must_agree
                else " (a host may set it for its own hardware; check it is meant)."
            )
        ),
        evidence={
            "variable": name,
            "values": [
                {"value": sorted(_shown(name, value), key=str), "hosts": where}
                for value, where in shown
            ],
        },
    )


def _shown(name: str, value: frozenset) -> list[str | None]:
    return [display_value(name, v) for v in value]


def _value_text(name: str, value: frozenset) -> str:
    texts = sorted("unset" if v is None else repr(v) for v in _shown(name, value))
    return " or ".join(texts)


def expectations_missed(evidence: Evidence) -> list[Finding]:
    """An --expect that processes on some hosts miss, grouped by (variable, status)."""
    by_miss: dict[tuple[str, str], dict[str, int]] = {}
    for check in _of(evidence).checks:
        for proc in targets(check):
            for c in proc.checks:
                if c.status != ExpectationStatus.OK:
                    slot = by_miss.setdefault((c.variable, str(c.status)), {})
                    slot[check.host] = slot.get(check.host, 0) + 1
    return [
        Finding(
            rule="hosts-expectation",
            severity="error",
            confidence="high",
            title=f"{variable} {status} on {compress(hosts)} ({sum(hosts.values())} process(es))",
            detail=f"Processes of the job that create NCCL communicators (or every readable one) "
            f"have {variable} {status} against what was expected, on {len(hosts)} host(s).",
            evidence={"variable": variable, "status": status, "processes_by_host": hosts},
        )
        for (variable, status), hosts in sorted(by_miss.items())
    ]


def lint_errors(evidence: Evidence) -> list[Finding]:
    """Each lint error env-check found, with the hosts it was found on."""
    by_text: dict[str, set[str]] = {}
    for check in _of(evidence).checks:
        for doc in check.documents:
            for line in doc.findings:
                pid, sep, text = line.partition(": lint error: ")
                if sep:
                    by_text.setdefault(text, set()).add(check.host)
    return [
        Finding(
            rule="hosts-lint",
            severity="error",
            confidence="high",
            title=f"lint error on {compress(hosts)}: {text}",
            detail="env-check's lint of the environment the job's processes were started with.",
            evidence={"hosts": sorted(hosts)},
        )
        for text, hosts in sorted(by_text.items())
    ]


def no_job(evidence: Evidence) -> list[Finding]:
    ev = _of(evidence)
    empty = sorted(c.host for c in ev.checks if not c.documents)
    if not empty:
        return []
    return [
        Finding(
            rule="hosts-no-job",
            severity="warning",
            confidence="high",
            title=f"no process of the job on {compress(empty)} ({_selector_text(ev.selector)})",
            detail="The agent on these hosts found no process whose environment or command line "
            "matches the job: the job does not run there, or it was named otherwise.",
            evidence={"hosts": empty, "selector": ev.selector},
        )
    ]


def not_checked(evidence: Evidence) -> list[Finding]:
    ev = _of(evidence)
    missing = ev.missing()
    if not missing:
        return []
    named = compress(missing) if isinstance(missing, list) else f"{missing} node(s)"
    launch = ev.launch or {}
    why = launch.get("reason") or "the agent wrote no document there"
    return [
        Finding(
            rule="hosts-not-checked",
            severity="error",
            confidence="high",
            title=f"not checked: {named} (no document came back: {why})",
            detail=f"The {ev.launcher or 'launcher'}'s run of the agent left no document for "
            "these hosts; each node's output is under --shared-dir's nodes/ folder.",
            evidence={"missing": missing, "launch": launch},
        )
    ]


def _selector_text(selector: dict) -> str:
    parts = [f"{k}={display_value(k, v)}" for k, v in (selector.get("env") or {}).items()]
    if selector.get("command"):
        parts.append(f"command line containing {selector['command']!r}")
    return " and ".join(parts) or "no selector"


HOSTS_ENV = RuleSet(
    "process environments across hosts",
    (setting_differs, expectations_missed, lint_errors, no_job, not_checked),
    needs=("hosts",),
)


def hosts_report(evidence: Evidence) -> Report:
    """`env-check --launcher`: the rule set across hosts over every node's documents, as a Report:
    the headline, the findings, then one table row per set of hosts alike (CSV and JSON: every
    host). Exit 1 on an error; 3 when no host had a readable process of the job."""
    ev = _of(evidence)
    report = judge(
        evidence,
        (HOSTS_ENV,),
        kind="env-check-hosts",
        fails_at="error",
        answered=any(targets(c) for c in ev.checks),
    )
    procs = sum(len(d.processes) for c in ev.checks for d in c.documents)
    headline = (
        f"env-check across {len(ev.checks)} host(s) ({ev.launcher}): {procs} processes of the job; "
        f"exit {report.verdict().exit_code}"
    )
    report.rows = [_row(check) for check in ev.checks]
    report.sections = [Lines([f"# {headline}"]), FINDINGS, Table(_grouped(report.rows))]
    report.document = _document(ev, report)
    return report


def _grouped(rows: list[dict]) -> list[dict]:
    """One row per set of hosts alike: a thousand hosts with the same settings are one row, and
    a host that differs stands out."""
    groups: dict[tuple, list[str]] = {}
    for row in rows:
        key = tuple((k, v) for k, v in row.items() if k not in ("host", "roots"))
        groups.setdefault(key, []).append(row["host"])
    return [{"hosts": compress(hosts), **dict(key)} for key, hosts in groups.items()]


def _document(ev: HostsEnvEvidence, report: Report) -> dict:
    return {
        "schema_version": 1,
        "kind": "env-check-hosts",
        "launcher": ev.launcher,
        "selector": ev.selector,
        "launch": ev.launch,
        "hosts": [_host_json(check) for check in ev.checks],
        "findings": [f.to_json() for f in report.findings],
        "verdict": {
            "exit_code": report.verdict().exit_code,
            "findings": [f.title for f in report.findings],
        },
    }


def _row(check: HostCheck) -> dict:
    procs = [p for d in check.documents for p in d.processes]
    common = _common_settings(check)
    return {
        "host": check.host,
        "processes": len(procs),
        "readable": sum(p.readable for p in procs),
        "roots": ",".join(map(str, check.roots)) or "-",
        "problem": check.problem or "",
        "settings": " ".join(
            f"{k}={v}"
            for k, v in sorted(common.items(), key=lambda kv: not kv[0].startswith("NCCL_"))
        ),
    }


def _common_settings(check: HostCheck) -> dict[str, str]:
    """The settings every process that matters on the host has, alike (shown masked)."""
    out = {}
    for name, values in sorted(host_values(check).items()):
        if len(values) == 1 and UNSET not in values:
            out[name] = display_value(name, next(iter(values)))
    return out


def _host_json(check: HostCheck) -> dict:
    return {
        "host": check.host,
        "roots": list(check.roots),
        "problem": check.problem,
        "processes": [
            {
                "pid": p.pid,
                "ppid": p.ppid,
                "role": p.role,
                "readable": p.readable,
                "env": p.env,
                "checks": [{"variable": c.variable, "status": str(c.status)} for c in p.checks],
            }
            for d in check.documents
            for p in d.processes
        ],
        "settings": _common_settings(check),
    }
