"""`ncclprobe topo`: the GPU topology (saved or live), and what each NCCL_P2P_LEVEL would connect."""

from __future__ import annotations

import click

from ncclprobe.cli.output import emit, format_option
from ncclprobe.evidence.text import read_text_file
from ncclprobe.evidence.topo import Topology, equivalent_levels, p2p_level_pairs, parse_topo
from ncclprobe.knobs import default_p2p_level

EPILOG = """\b
Examples:
  ncclprobe topo
  ncclprobe topo --no-p2p-check --format json
  nvidia-smi topo -m > topo.txt; ncclprobe topo --from topo.txt
"""


@click.command(epilog=EPILOG, short_help="Show the GPU topology and which P2P levels differ.")
@click.option("--from", "source", type=click.Path(dir_okay=False), help="Saved `nvidia-smi topo -m` output.")
@click.option("--p2p-check/--no-p2p-check", default=True, show_default=True,
              help="Live only: copy a known pattern across every GPU pair and read it back.")
@click.option("--p2p-timeout", type=click.FloatRange(1, 3600), default=120.0, show_default=True,
              help="Seconds before the P2P check counts as hung.")
@click.option("--nccl-version", help="NCCL version, to name the default P2P level [live: torch's NCCL].")
@format_option
def command(source, p2p_check, p2p_timeout, nccl_version, fmt):
    """Read the GPU topology from a saved `nvidia-smi topo -m` (--from) or from this machine
    (nvidia-smi, NVML, torch's peer-access matrix; each missing source is named), and show for
    each NCCL_P2P_LEVEL the GPU pairs NCCL would connect peer-to-peer, grouping levels that
    connect the same pairs. Live, it also checks real data across every GPU pair, because the
    driver can report P2P that corrupts data or hangs. Exits 1 when that check fails.
    """
    vendor = None
    if source:
        topo = parse_topo(read_text_file(source, "topology file"))
        topo.source = str(source)
    else:
        from ncclprobe.evidence.topo_live import host_cpu_vendor, read_live_topology
        topo = read_live_topology(p2p_check=p2p_check, p2p_timeout_s=p2p_timeout)
        vendor, nccl_version = host_cpu_vendor(), nccl_version or _torch_nccl_version()
    default = default_p2p_level(nccl_version, vendor, len(topo.gpus))
    doc = {**topo.to_json(), "nccl_version": nccl_version, "cpu_vendor": vendor, "default_p2p_level": default}
    extra = [f"NCCL {nccl_version} default P2P level here: {default}"] if default else []
    emit(fmt, doc, matrix_rows(topo), title=_title(topo), notes=notes(topo) + extra)
    return 1 if topo.p2p_check and topo.p2p_check["status"] in ("corrupt", "hang", "error") else 0


def _title(topo: Topology) -> str:
    s = topo.summary
    return (f"{s['gpu_count']} GPU(s), NVLink {'yes' if s['nvlink'] else 'no' if s['nvlink'] is False else 'unknown'}, "
            f"worst path {s['worst_path'] or '-'}, NUMA nodes {s['numa_spread'] or '?'} ({topo.source})")


def matrix_rows(topo: Topology) -> list[dict]:
    rows = []
    for gpu, links in zip(topo.gpus, topo.gpu_links):
        row = {"": f"GPU{gpu.index}"}
        row.update({f"GPU{j}": code or "?" for j, code in enumerate(links)})
        row.update({"CPU affinity": gpu.cpu_affinity, "NUMA": gpu.numa_affinity})
        rows.append(row)
    return rows


def notes(topo: Topology) -> list[str]:
    levels = p2p_level_pairs(topo)
    out = []
    for group in equivalent_levels(topo):
        pairs = levels[group[0]]
        shown = " ".join(f"{i}-{j}" for i, j in sorted(pairs)[:12]) + (" ..." if len(pairs) > 12 else "")
        out.append(f"NCCL_P2P_LEVEL {'/'.join(group)}: {len(pairs)} P2P pair(s) {shown}".rstrip())
    if topo.nics:
        out.append("NICs: " + ", ".join(f"{n} ({topo.nic_devices[n]})" if n in topo.nic_devices else n
                                        for n in topo.nics))
    out += [f"source {name}: {state}" for name, state in topo.sources.items()]
    if topo.p2p_check:
        out.append(f"P2P data check: {topo.p2p_check['status']}"
                   + (f" ({topo.p2p_check['reason']})" if topo.p2p_check.get("reason") else ""))
    return out + topo.notes



def _torch_nccl_version() -> str | None:
    try:
        import torch
        return ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except Exception:   # no torch, or a build without NCCL: the default level stays unnamed
        return None
