"""`knobs --lint`'s evidence, gathered: the NCCL settings of this environment (or of a `vllm
collect-env` / `sglang check_env` text), the GPUs' topology (a saved `nvidia-smi topo -m`, else this
machine's, else the collect-env text's) and the NCCL version (given, else torch's, else the text's)."""

from __future__ import annotations

import os

from ncclprobe.evidence.nccl.nccl_log import NcclLog
from ncclprobe.evidence.settings import SettingsEvidence
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.provenance import nccl_version_string


def gather_settings(
    *, topo_file: str | None = None, nccl_version: str | None = None, collect_env: str | None = None
) -> SettingsEvidence:
    if collect_env:
        from ncclprobe.evidence.node.collect_env import load_collect_env

        collected = load_collect_env(collect_env)
        return SettingsEvidence(
            env=collected.nccl_settings,
            node=node_facts(topo_file) if topo_file else collected.node,
            nccl_version=nccl_version or collected.nccl_version,
            source=str(collect_env),
            notes=list(collected.notes),
        )
    return SettingsEvidence(
        env={k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
        node=node_facts(topo_file),
        nccl_version=nccl_version or nccl_version_string(),
    )


def node_facts(topo_file: str | None) -> NodeFacts | None:
    """The GPUs the lint judges: a saved topology, or this machine's (None without GPUs)."""
    if topo_file:
        from ncclprobe.evidence.node.topo import load_topo
        from ncclprobe.evidence.node.topo import node_facts as facts

        return facts(load_topo(topo_file))
    from ncclprobe.evidence.live.topo_live import live_node_facts

    return live_node_facts()


def log_settings(log: NcclLog) -> SettingsEvidence:
    """What an NCCL log says NCCL read, with what the log itself shows of the links (ranks
    connected only through NET met over the network) and its version."""
    over_network = bool(log.transports) and set(log.transports) == {"NET"}
    return SettingsEvidence(
        log.env,
        node=NodeFacts(over_network=True) if over_network else None,
        nccl_version=log.nccl_version,
        source="the NCCL log",
    )
