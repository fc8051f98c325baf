"""NCCL's model against the measurement: where the bandwidths NCCL assumed (its topology dump's PCIe
links, its ring graph's per-channel speed) differ from what `topo --check` measured by more than a
factor 1.5. A judgement over two readings (`ncclprobe.evidence.nccl.nccl_xml`, the P2P matrices)."""

from __future__ import annotations

from ncclprobe.evidence.nccl.nccl_xml import NcclGraph, NcclTopology
from ncclprobe.evidence.node.matrix import Matrix

DISAGREE_FACTOR = 1.5  # assumed and measured differ by more than this, either way


def model_disagreements(
    topology: NcclTopology | None, graphs: list[NcclGraph], matrices: list[Matrix]
) -> list[str]:
    """Where NCCL's assumed bandwidths differ from the measured ones by more than a factor 1.5."""
    out = []
    h2d = next((m for m in matrices if m.metric == "bandwidth" and m.rows == ["CPU"]), None)
    if topology and h2d:
        for g in topology.gpus:
            label = f"GPU{g.dev}"
            if label in h2d.cols:
                measured = h2d.values[0][h2d.cols.index(label)]
                assumed, fallback = g.assumed_pci_gbps
                if measured and not 1 / DISAGREE_FACTOR <= measured / assumed <= DISAGREE_FACTOR:
                    out.append(
                        f"{label}: NCCL assumes {assumed:.0f} GB/s for its PCIe link "
                        f"({g.link_speed or 'no speed'} x{g.link_width or '?'}{', fallback' if fallback else ''}), "
                        f"host->device measured {measured:.1f} GB/s"
                    )
    pair = next(
        (
            m
            for m in matrices
            if m.metric == "bandwidth"
            and m.square
            and m.peer_access == "enabled"
            and m.engine == "ce"
            and m.direction == "unidirectional"
        ),
        None,
    )
    for graph in graphs:
        if graph.algorithm != "ring" or pair is None:
            continue
        hops = [
            (ch[k], ch[(k + 1) % len(ch)])
            for ch in graph.channels
            if len(ch) > 1
            for k in range(len(ch))
        ]
        seen = [
            value
            for i, j in hops
            if i < len(pair.rows) and j < len(pair.rows) and (value := pair.values[i][j])
        ]
        if seen:
            slowest = min(seen)
            expected = graph.speed_intra_gbps * graph.nchannels
            if not 1 / DISAGREE_FACTOR <= slowest / expected <= DISAGREE_FACTOR:
                out.append(
                    f"ring: NCCL expects {expected:.1f} GB/s ({graph.nchannels} channels x "
                    f"{graph.speed_intra_gbps:g} GB/s over {graph.type_intra}), the slowest ring hop measured "
                    f"{slowest:.1f} GB/s"
                )
    return out
