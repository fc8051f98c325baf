"""The settings found in the evidence, judged by the same safety rule as recommend and run-engine
(`ncclprobe.nccl.safety`): a value NCCL rejects or silently ignores, and LL128 forced where NCCL
keeps it off on the GPUs the trace recorded (`node`). Every environment in the evidence is linted:
the runs' settings, each worker's environment at communicator creation (a value exported in the
shell reaches the workers without being asked for), each process an env-check read, what each
rank's NCCL log says NCCL read and the shell a collect-env text came from. One finding
per distinct problem, however many runs, modes and ranks carry it, naming the cause first."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ncclprobe.diagnose.rules_machines import one_machine
from ncclprobe.diagnose.run.sweep_match import tuning_settings
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.bundle import RUN_NODE
from ncclprobe.evidence.live.env_check_document import KIND
from ncclprobe.evidence.run.view import nccl_env
from ncclprobe.findings import Finding, RuledOut
from ncclprobe.nccl.known_bad import capability_of
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.lint_datapath import LL128_RULE
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.safety import ALLOW_LL128_FLAG, TOPOLOGY_CODES, ll128_hazard

RULE = "unsafe-settings"
HYPOTHESIS = "a setting NCCL rejects, ignores, or that forces LL128 where NCCL keeps it off"


def unsafe_settings(ev: E.Evidence) -> list:
    """The lint over every environment in the evidence: each run's settings, each worker's
    environment at communicator creation, each process env-check read. One finding per problem,
    naming every place it was found, and what NCCL's own log says about it where one was read."""
    nccl = (ev.config.get("backend") or "nccl") == "nccl"
    node = _with_capabilities(ev) if one_machine(ev) else None  # unsure whose: judged without
    found: dict[tuple, Finding] = {}
    places: dict[tuple, list[str]] = {}
    checked = []
    for where, settings, version in _environments(ev):
        checked.append(where)
        for key, finding in _problems(settings, node, version, nccl, where, ev.node_source):
            found.setdefault(key, finding)
            places.setdefault(key, []).append(where)
    if found:
        return [
            _with_places(finding, places[key], _log_confirms(ev, finding))
            for key, finding in found.items()
        ]
    if not checked:  # no environment set an NCCL variable: nothing to judge
        return []
    return [
        RuledOut(
            rule=RULE,
            hypothesis=HYPOTHESIS,
            reason=f"the knowledge table's lint finds no error in the settings of {_short(checked)}",
        )
    ]


def _with_capabilities(ev: E.Evidence) -> NodeFacts | None:
    """The node, with the GPUs' compute capability the other sources read where its own record
    has none (a collect-env's topology names no capability; its GPU names, the profiles' device
    properties do): only called where the inputs describe one machine."""
    node = ev.node
    if node is None or node.compute_capabilities:
        return node
    caps = {c for view in ev.machines for c in view.capabilities}
    if not caps and ev.collect_env is not None:
        caps = set(ev.collect_env.compute_capabilities)
        caps |= {c for c in map(capability_of, ev.collect_env.gpu_names) if c is not None}
    return replace(node, compute_capabilities=tuple(sorted(caps))) if caps else node


def _environments(ev: E.Evidence) -> Iterator[tuple[str, dict[str, str], str | None]]:
    """(where, NCCL settings, NCCL version) for every environment the evidence holds."""
    for source, run in ev.all_runs():
        version = next((w.nccl_version for w in run.workers if w.nccl_version), None)
        asked = tuning_settings(run.settings)
        if asked:
            yield run.name(source), asked, version
        for worker in run.workers:
            env = tuning_settings(nccl_env(worker.env_at_comm_init))
            if env and env != asked:
                yield f"{run.name(source)} rank {worker.rank}", env, worker.nccl_version or version
    processes = ev.env_check.processes if ev.env_check and ev.env_check.kind == KIND else ()
    for proc in processes:
        env = tuning_settings(nccl_env(proc.env))
        if env:
            yield f"env-check pid {proc.pid}", env, proc.nccl_version
    for log in ev.nccl_logs:  # what each rank's NCCL says it read
        if tuning_settings(log.log.env):
            yield f"NCCL log {log.label}", tuning_settings(log.log.env), log.log.nccl_version
    collected = ev.collect_env
    if collected is not None and tuning_settings(collected.nccl_settings):
        yield (
            f"{collected.tool} (the collecting shell)",
            tuning_settings(collected.nccl_settings),
            collected.nccl_version,
        )


def _with_places(finding: Finding, places: list[str], confirmed: str) -> Finding:
    detail = (
        finding.detail.replace(f"Found in {places[0]}.", f"Found in {_short(places)}.") + confirmed
    )
    return replace(finding, detail=detail, evidence={**finding.evidence, "found_in": places})


def _log_confirms(ev: E.Evidence, finding: Finding) -> str:
    """What NCCL's own log says about the variable, on the workers that had it set."""
    variable = finding.evidence.get("variable")
    workers = [
        w
        for _, run in ev.all_runs()
        for w in run.workers
        if variable and variable in nccl_env(w.env_at_comm_init) and w.nccl_read
    ]
    if not workers:
        return ""
    unread = sorted({w.rank for w in workers if variable not in w.nccl_read}, key=str)
    if unread:
        return (
            f" NCCL's own log confirms it: rank{'s' if len(unread) > 1 else ''} {', '.join(map(str, unread))} "
            f"logged the variables NCCL read, and {variable} is not among them."
        )
    return ""


def _short(places: list[str], limit: int = 4) -> str:
    """`untuned baseline (ranks 0, 1), tuned baseline, ...`: places grouped by run."""
    ranks: dict[str, list[str]] = {}
    for place in places:
        run, sep, rank = place.partition(" rank ")
        ranks.setdefault(run, []).extend([rank] if sep else [])
    shown = [
        run + (f" (rank{'s' if len(r) > 1 else ''} {', '.join(r)})" if r else "")
        for run, r in ranks.items()
    ]
    return ", ".join(shown[:limit]) + (
        f" and {len(shown) - limit} more" if len(shown) > limit else ""
    )


def _problems(
    settings: dict,
    node: NodeFacts | None,
    version: str | None,
    nccl: bool,
    run: str,
    node_source: str | None = None,
) -> Iterator[tuple[tuple[str | None, str], Finding]]:
    for f in lint_env(settings, node=node, nccl_version=version):
        if (
            f.severity == "error"
            and f.code != LL128_RULE
            and (nccl or f.code not in TOPOLOGY_CODES)
        ):
            yield (
                (f.variable, f.message),
                Finding(
                    rule=RULE,
                    severity="error",
                    confidence="high",
                    title=f.message,
                    detail=f"Found in {run}. Fix: {f.fix}.",
                    evidence={
                        "run": run,
                        "variable": f.variable,
                        "value": settings.get(f.variable),
                        "lint": f.code,
                    },
                    next_command=f"ncclprobe knobs {f.variable}",
                ),
            )
    hazard = ll128_hazard(settings, node, version) if nccl else None
    if hazard:
        own = node is not None and node_source == RUN_NODE
        whose = (
            f" Judged with the topology of {node_source}"
            + ("" if own else ": if the run used other GPUs, this verdict is not about them")
            + "."
            if node is not None
            else ""
        )
        yield (
            ("NCCL_PROTO", hazard.summary),
            Finding(
                rule=RULE,
                severity="error" if hazard.on is False else "warning",
                confidence=("high" if own else "medium") if hazard.on is False else "low",
                title=f"NCCL_PROTO={settings['NCCL_PROTO']} forces LL128, and {hazard.summary}",
                detail=(
                    f"Found in {run}. NCCL enables LL128 only where it verified that 128-byte stores arrive in "
                    "order; forced elsewhere it can corrupt data silently. run-engine and recommend refuse it "
                    f"without {ALLOW_LL128_FLAG}.{whose}"
                ),
                evidence={
                    "run": run,
                    "NCCL_PROTO": settings["NCCL_PROTO"],
                    "node": node.to_json() if node else None,
                    "node_from": node_source,
                },
                next_command="nvidia-smi topo -m > topo.txt && ncclprobe knobs --lint --topo topo.txt",
            ),
        )
