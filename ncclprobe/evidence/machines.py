"""Which machine each piece of evidence describes, as far as it says: its GPU models and compute
capabilities, how many GPUs that machine has (or at least has), its host names, its NCCL. The
inputs of one diagnosis may come from different machines (a collect-env text of one box beside
the NCCL logs of a job on another); `diagnose.rules_machines` compares these views before any
rule joins a fact of one source with a fact of another.

Read from: the ranks' NCCL logs (nccl-tests' device lines name the GPUs, `cudaDev N` of each
communicator says that a host has at least N + 1 GPUs, the log prefix names the hosts, the banner
the release), a collect-env text (its GPU lines, compute capabilities, topology matrix and NCCL),
the run's own record of its GPUs (an engine trace's `node`) and the profiles' device properties.
A source that says nothing of a fact leaves it empty: nothing is compared that was not read.
The NCCL logs are one view per machine (`nccl_log_groups`: logs that share a host name are one
host's, a log that names none is its own), so logs of two machines are compared, not merged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ncclprobe.evidence.nccl.known_bad_scan import scan
from ncclprobe.evidence.nccl.nccl_rank_logs import RankNcclLog
from ncclprobe.nccl.known_bad import capability_of

# where a node record came from when the run recorded it itself (the bundle names its sources)
RUN_NODE = "the run's own record (the engine trace's `node`: the GPUs it used)"

if TYPE_CHECKING:
    from ncclprobe.evidence.node.collect_env import CollectEnv
    from ncclprobe.nccl.node import NodeFacts


class Sources(Protocol):
    """What the views are read from: the evidence bundle's sources (a protocol, so that the bundle,
    which holds the views, and this module do not import each other)."""

    @property
    def collect_env(self) -> CollectEnv | None: ...
    @property
    def node(self) -> NodeFacts | None: ...
    @property
    def node_source(self) -> str | None: ...
    @property
    def config(self) -> dict: ...
    @property
    def kind(self) -> str: ...
    @property
    def nccl_logs(self) -> list[RankNcclLog]: ...


@dataclass(frozen=True)
class MachineView:
    """What one source says of the machine it describes."""

    source: str  # in words: "the NCCL logs", "the vllm collect-env text"
    gpu_models: tuple[str, ...] = ()  # as printed, without the vendor's prefix
    capabilities: tuple[int, ...] = ()  # major*10+minor
    gpus: int | None = None  # the GPUs the machine has (a topology matrix's count)
    gpus_at_least: int | None = None  # the GPUs it has at least (the highest device used + 1)
    hosts: tuple[str, ...] = ()
    nccl: str | None = None  # the NCCL release this source saw loaded
    job_part: bool = False  # one host's NCCL logs among several (a job may span hosts)


def machine_views(ev: Sources) -> list[MachineView]:
    """Each source's view, only where two or more sources could be compared (no file is read
    again for a single source)."""
    collected = ev.collect_env
    record = ev.node if ev.node is not None and ev.node_source == RUN_NODE else None
    profiled = ev.config.get("gpus") if ev.kind == "profile" else None
    groups = nccl_log_groups(ev.nccl_logs)
    if len(groups) < 2 and sum(bool(x) for x in (ev.nccl_logs, collected, record, profiled)) < 2:
        return []
    views = [_from_nccl_logs(group, len(groups) > 1) for group in groups]
    if collected is not None:
        models = tuple(_model(n) for n in collected.gpu_names)
        caps = set(collected.compute_capabilities) | _capabilities(collected.gpu_names)
        topology = collected.topology
        views.append(
            MachineView(
                source=f"the {collected.tool} text",
                gpu_models=models,
                capabilities=tuple(sorted(caps)),
                gpus=len(topology.gpus) if topology is not None and topology.gpus else None,
                nccl=collected.nccl_version,
            )
        )
    if record is not None:
        views.append(
            MachineView(
                source="the run's own record",
                capabilities=tuple(sorted(set(record.compute_capabilities or ()))),
            )
        )
    if profiled:
        names = [str(n) for n in profiled]
        views.append(
            MachineView(
                source="the profiles",
                gpu_models=tuple(dict.fromkeys(_model(n) for n in names)),
                capabilities=tuple(sorted(_capabilities(names))),
            )
        )
    return [v for v in views if v.gpu_models or v.capabilities or v.gpus or v.gpus_at_least]


def nccl_log_groups(logs: Sequence[RankNcclLog]) -> list[list[RankNcclLog]]:
    """The ranks' logs by machine: logs that name a host in common are one machine's (the ranks of
    one job on one host); a log that names no host is a machine of its own, as nothing ties it to
    the others. The logs of one job on several hosts are several groups: each host's GPUs are its
    own."""
    groups: list[list[RankNcclLog]] = []
    hosts: list[set[str]] = []
    for log in logs:
        mine = set(log.log.hosts)
        joined = [i for i, h in enumerate(hosts) if mine and h & mine]
        group, names = [log], set(mine)
        for i in reversed(joined):
            group = groups.pop(i) + group
            names |= hosts.pop(i)
        groups.append(group)
        hosts.append(names)
    return groups


def _from_nccl_logs(logs: Sequence[RankNcclLog], several: bool = False) -> MachineView:
    names = scan([log.path for log in logs]).gpu_names
    devices = [
        c["cuda_dev"]
        for log in logs
        if len(log.log.hosts) <= 1  # a log of one host: its devices are that host's
        for c in log.log.communicators
        if isinstance(c.get("cuda_dev"), int)
    ]
    versions = {log.log.nccl_version for log in logs if log.log.nccl_version}
    hosts = sorted({h for log in logs for h in log.log.hosts})
    source = "the NCCL logs"
    if several:
        source += f" of {', '.join(hosts)}" if hosts else f" {Path(logs[0].path).name}"
    return MachineView(
        source=source,
        job_part=several,
        gpu_models=tuple(dict.fromkeys(_model(n) for n in names)),
        capabilities=tuple(sorted(_capabilities(names))),
        gpus_at_least=max(devices) + 1 if devices else None,
        hosts=tuple(hosts),
        nccl=versions.pop() if len(versions) == 1 else None,
    )


def _capabilities(names: Iterable[str]) -> set[int]:
    return {c for c in map(capability_of, names) if c is not None}


def _model(name: str) -> str:
    """`NVIDIA GeForce RTX 5090` -> `GeForce RTX 5090`: the same GPU as two tools name it."""
    name = " ".join(name.split())
    return name[len("NVIDIA ") :] if name.startswith("NVIDIA ") else name
