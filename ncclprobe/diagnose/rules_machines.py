"""Whether the inputs describe one machine (`evidence.machines`): where they disagree about it (GPU
models or compute capabilities, a GPU used that the other machine does not have, host names), one
finding says so first, and the rules that join a fact of one source with a fact of another (a
topology with a transport, a collecting shell's NCCL with the job's, its GPUs with the job's
release) ask `one_machine` and keep each source to itself. NCCL releases alone may differ on one
machine (the workers load another library: `nccl-version`), so they are named beside the
disagreement, never taken for one. The ranks' NCCL logs are one view per host (`machines`): two
hosts' logs may be one job over hosts, so between them only the GPUs and the NCCL release (one
job's ranks load one) are compared, never the host names. Where nothing disagrees, the cause is
ruled out only where host names were compared and match; a GPU model alone (two boxes of the same
GPU) leaves it not checked."""

from __future__ import annotations

from itertools import combinations

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.machines import MachineView
from ncclprobe.findings import Finding, NotChecked, RuledOut

RULE = "machines"
HYPOTHESIS = "the inputs describe different machines"


def disagreements(views: list[MachineView]) -> list[str]:
    """Each pair of sources' disagreement about the machine, in words."""
    out = []
    for a, b in combinations(views, 2):
        if a.capabilities and b.capabilities and not set(a.capabilities) & set(b.capabilities):
            out.append(
                f"GPU compute capability {_caps(a)} ({a.source}) against {_caps(b)} ({b.source})"
            )
        elif a.gpu_models and b.gpu_models and not set(a.gpu_models) & set(b.gpu_models):
            out.append(
                f"GPUs {', '.join(a.gpu_models)} ({a.source}) against "
                f"{', '.join(b.gpu_models)} ({b.source})"
            )
        if a.job_part and b.job_part:
            if a.nccl and b.nccl and a.nccl != b.nccl:  # one job's ranks load one release
                out.append(f"NCCL {a.nccl} ({a.source}) against {b.nccl} ({b.source})")
            continue  # two hosts' NCCL logs: a job may span hosts; only GPUs and NCCL compared
        for used, shown in ((a, b), (b, a)):
            if used.gpus_at_least and shown.gpus and used.gpus_at_least > shown.gpus:
                out.append(
                    f"GPU {used.gpus_at_least - 1} used ({used.source}) on a machine of "
                    f"{shown.gpus} GPU(s) ({shown.source})"
                )
        if a.hosts and b.hosts and not set(a.hosts) & set(b.hosts):
            out.append(f"hosts {', '.join(a.hosts)} against {', '.join(b.hosts)}")
    return out


def one_machine(ev: E.Evidence) -> bool:
    """True unless the inputs disagree about the machine: only then may a rule join their facts."""
    return not disagreements(ev.machines)


def machines(ev: E.Evidence) -> list:
    views = ev.machines
    if len(views) < 2:
        return []
    found = disagreements(views)
    if not found:
        if all(v.job_part for v in views):
            return []  # hosts' NCCL logs that agree: one job over hosts, or not; nothing to judge
        said = "; ".join(_said(v) for v in views)
        named = [v for v in views if v.hosts]
        if len(named) >= 2 and set.intersection(*(set(v.hosts) for v in named)):
            return [RuledOut(rule=RULE, hypothesis=HYPOTHESIS, reason=f"{said}: nothing disagrees")]
        # the same GPU model in two boxes is no proof of one box: not ruled out without hosts
        return [
            NotChecked(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                missing=f"{said}: no disagreement found between the inputs (nothing here "
                "identifies the host; a host name in each input would)",
            )
        ]
    releases = {v.source: v.nccl for v in views if v.nccl}
    versions = (
        " Their NCCL differs too: "
        + ", ".join(f"{nccl} ({source})" for source, nccl in releases.items())
        + "."
        if len(set(releases.values())) > 1 and not any(f.startswith("NCCL ") for f in found)
        else ""
    )
    return [
        Finding(
            rule=RULE,
            severity="error",
            confidence="high",
            title=f"the inputs describe different machines: {found[0]}",
            detail="The files given together disagree about the machine: "
            + "; ".join(found)
            + "."
            + versions
            + " No fact of one is joined with a fact of another below (a topology with a "
            "transport, one's GPUs with the other's NCCL release): each finding rests on one "
            "source. Give the files of one job on one machine to judge them together.",
            evidence={
                "disagreements": found,
                "sources": {v.source: _json(v) for v in views},
            },
        )
    ]


def _caps(view: MachineView) -> str:
    return ", ".join(f"{c // 10}.{c % 10}" for c in view.capabilities)


def _said(view: MachineView) -> str:
    parts = [", ".join(view.gpu_models)] if view.gpu_models else []
    parts += [f"compute capability {_caps(view)}"] if view.capabilities else []
    parts += [f"{view.gpus} GPU(s)"] if view.gpus else []
    parts += [f"host {', '.join(view.hosts)}"] if view.hosts else []
    return f"{view.source}: {', '.join(parts) or 'no GPU named'}"


def _json(view: MachineView) -> dict:
    """The facts this source said (those it did not say are left out, not shown as None)."""
    facts = {
        "gpu_models": list(view.gpu_models),
        "capabilities": list(view.capabilities),
        "gpus": view.gpus,
        "gpus_at_least": view.gpus_at_least,
        "hosts": list(view.hosts),
        "nccl": view.nccl,
    }
    return {k: v for k, v in facts.items() if v not in (None, [])}


RULES = (machines,)
