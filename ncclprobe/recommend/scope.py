"""NCCL_ALGO as a recommendation exports it: only for the collectives measured faster with it.

A plain NCCL_ALGO list governs every collective of the job, and a list one collective gains from can
leave another none of the algorithms it can run at all (NCCL_ALGO=Tree: broadcast and reduce run only
Ring; all-gather and reduce-scatter Ring, PAT, NVLS or CollNetDirect), which NCCL 2.24+ answers by
failing that collective's call. NCCL 2.24+ also reads a per-collective form (`allreduce:Tree`, `;`
between clauses; a collective no clause names keeps NCCL's own choice: parseList, src/graph/
tuning.cc), so the export names the collectives measured faster with the list that can run it, and
no other.

Before 2.24 there is no per-collective form (`values.PER_COLLECTIVE_SINCE`): the list is exported
job-wide as measured, and the note says so and names the collectives it strands (they run Ring). A
collective measured fine under a list it cannot run is itself such evidence: 2.24+ fails that call,
so where the results do not name their NCCL version they come from an older one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ncclprobe.nccl.names import COLLECTIVE, COLLECTIVE_NAMES, FUNCTION_ALGORITHMS
from ncclprobe.nccl.values import PER_COLLECTIVE_SINCE, stranded_functions, token_lists
from ncclprobe.nccl.version import parse_version, release

ALGO = "NCCL_ALGO"
_NAMES = {c.token: c.name for c in COLLECTIVE_NAMES}  # NCCL's function token -> ncclprobe's name


@dataclass(frozen=True)
class Scoped:
    """The environment to export and what it says about NCCL_ALGO's scope."""

    env: dict[str, str]
    notes: tuple[str, ...] = ()

    @property
    def dropped(self) -> bool:
        """Whether NCCL_ALGO was left out (no collective measured faster can run it)."""
        return ALGO not in self.env


def scope_algorithm(
    settings: Mapping[str, str], faster: Iterable[str], nccl_version: str | None
) -> Scoped:
    """`settings` to export, their plain NCCL_ALGO list scoped to `faster` (ncclprobe's collective
    names, those measured faster with the settings) where the results' NCCL reads the form."""
    value = settings.get(ALGO)
    plain = token_lists(value).get("all") if value is not None else None
    if value is None or plain is None or ":" in value or ";" in value:
        return Scoped(dict(settings))  # nothing to scope, or already per collective
    tuned = [COLLECTIVE[name].token for name in faster if COLLECTIVE[name].tuned]
    runs = [f for f in FUNCTION_ALGORITHMS if f in tuned and _runs(plain.allows, f)]
    cannot = [f for f in FUNCTION_ALGORITHMS if f in tuned and f not in runs]
    version = parse_version(nccl_version)
    if (version is not None and version < PER_COLLECTIVE_SINCE) or (version is None and cannot):
        return Scoped(dict(settings), (_job_wide(value, version, runs, cannot),))
    env = {k: v for k, v in settings.items() if k != ALGO}
    if runs:
        env[ALGO] = ";".join(f"{function}:{value}" for function in runs)
    notes = [_scoped(value, env.get(ALGO), runs, version)] if runs else []
    if cannot:
        notes.append(
            f"{_listed(cannot)} measured faster under {ALGO}={value}, which "
            f"{'it' if len(cannot) == 1 else 'they'} cannot run (NCCL 2.24+ fails such a call): "
            f"that is not a measurement of {value}, which is not set for "
            f"{'it' if len(cannot) == 1 else 'them'}"
        )
    return Scoped(dict(sorted(env.items())), tuple(notes))


def _runs(allows, function: str) -> bool:
    return any(allows(algorithm) for algorithm in FUNCTION_ALGORITHMS[function])


def _scoped(value: str, written: str | None, runs: list[str], version) -> str:
    stranded = stranded_functions(value)
    unknown = (
        ""
        if version is not None
        else f" (the results do not name their NCCL version: before 2.24 NCCL reads no "
        f"per-collective form, and {ALGO}={value} is job-wide)"
    )
    return (
        f"{ALGO}={written}: {value} only for {_listed(runs)}, measured faster with it, in NCCL "
        f"2.24+'s per-collective form; every other collective keeps NCCL's own choice"
        + (
            f" (job-wide, {ALGO}={value} would leave {_listed(stranded)} no algorithm they can run, "
            "and NCCL 2.24+ fails their calls)"
            if stranded
            else ""
        )
        + unknown
    )


def _job_wide(value: str, version, runs: list[str], cannot: list[str]) -> str:
    why = (
        f"on NCCL {release(version)}"
        if version is not None
        else f"on the NCCL these results come from: {_listed(cannot)} ran under {ALGO}={value}, "
        "which NCCL 2.24+ refuses them, so it is older"
    )
    stranded = stranded_functions(value)
    form = ";".join(f"{function}:{value}" for function in runs or ["allreduce"])
    return (
        f"{ALGO}={value} is job-wide {why} (the per-collective form, {ALGO}={form}, needs "
        "2.24+): it sets the algorithm of every collective, measured faster with it or not"
        + (
            f", and leaves {_listed(stranded)} none they can run (before 2.24 NCCL runs them on Ring)"
            if stranded
            else ""
        )
    )


def _listed(functions: list[str]) -> str:
    return ", ".join(_NAMES[f] for f in functions)
