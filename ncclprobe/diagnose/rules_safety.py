"""The settings found in the evidence, judged by the same safety rule as recommend and run-engine
(`ncclprobe.nccl.safety`): a value NCCL rejects or silently ignores, and LL128 forced where NCCL
keeps it off on the GPUs the trace recorded (`node`). One finding per distinct problem, however
many runs, modes and ranks carry it."""

from __future__ import annotations

from ncclprobe.diagnose import evidence as E
from ncclprobe.diagnose.findings import Finding, RuledOut
from ncclprobe.diagnose.sweep_match import tuning_settings
from ncclprobe.nccl.lint import LL128_RULE, lint_env
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.nccl.safety import ALLOW_LL128_FLAG, TOPOLOGY_CODES, ll128_hazard

RULE = "unsafe-settings"
HYPOTHESIS = "a setting NCCL rejects, ignores, or that forces LL128 where NCCL keeps it off"


def unsafe_settings(ev: E.Evidence) -> list:
    nccl = (ev.config.get("backend") or "nccl") == "nccl"
    node = NodeFacts.from_json(ev.node) if ev.node else None
    found: dict[tuple, Finding] = {}
    checked = []
    for source, run in ev.all_runs():
        settings = tuning_settings(run.effective_settings() or run.settings)
        if not settings:
            continue
        checked.append(run.name(source))
        version = next((w.nccl_version for w in run.workers if w.nccl_version), None)
        for key, finding in _problems(settings, node, version, nccl, run.name(source)):
            found.setdefault(key, finding)
    if found:
        return list(found.values())
    if not checked:   # no run set an NCCL variable: nothing to judge
        return []
    return [RuledOut(rule=RULE, hypothesis=HYPOTHESIS,
                     reason=f"the knowledge table's lint finds no error in the settings of {', '.join(checked)}")]


def _problems(settings: dict, node: NodeFacts | None, version: str | None, nccl: bool, run: str):
    for f in lint_env(settings, node=node, nccl_version=version):
        if f.severity == "error" and f.code != LL128_RULE and (nccl or f.code not in TOPOLOGY_CODES):
            yield (f.variable, f.message), Finding(
                rule=RULE, severity="error", confidence="high", title=f.message, detail=f"Found in {run}. Fix: {f.fix}.",
                evidence={"run": run, "variable": f.variable, "value": settings.get(f.variable), "lint": f.code},
                next_command=f"ncclprobe knobs {f.variable}")
    hazard = ll128_hazard(settings, node, version) if nccl else None
    if hazard:
        yield ("NCCL_PROTO", hazard.summary), Finding(
            rule=RULE, severity="error" if hazard.on is False else "warning",
            confidence="high" if hazard.on is False else "low",
            title=f"NCCL_PROTO={settings['NCCL_PROTO']} forces LL128, and {hazard.summary}",
            detail=(f"Found in {run}. NCCL enables LL128 only where it verified that 128-byte stores arrive in "
                    "order; forced elsewhere it can corrupt data silently. run-engine and recommend refuse it "
                    f"without {ALLOW_LL128_FLAG}."),
            evidence={"run": run, "NCCL_PROTO": settings["NCCL_PROTO"], "node": node.to_json() if node else None},
            next_command="ncclprobe knobs --lint --topo <nvidia-smi topo -m output>")
