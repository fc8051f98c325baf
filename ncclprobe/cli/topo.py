"""`ncclprobe topo`: the GPU topology (saved or live), and what each NCCL_P2P_LEVEL would connect;
with --check, the PCIe health evidence: gathered (`ncclprobe.gather.p2p`), judged by the P2P rule set
(`ncclprobe.diagnose.p2p.check`), printed by the one renderer."""

from __future__ import annotations

import click

from ncclprobe.cli import exit_codes
from ncclprobe.cli.output import emit, emit_report, format_option, output_option
from ncclprobe.cli.types import StrictFloat, Version
from ncclprobe.evidence.node.topo import Topology, equivalent_levels, load_topo, p2p_level_pairs
from ncclprobe.nccl.p2p import default_p2p_level

EPILOG = f"""\b
Examples:
  ncclprobe topo
  ncclprobe topo --no-p2p-check --format json
  nvidia-smi topo -m > topo.txt; ncclprobe topo --from topo.txt
  ncclprobe topo --check --output topo-check/

{exit_codes("fine", "a P2P copy returned wrong data or hung, or --check found an error", "nothing readable here")}"""


@click.command(
    epilog=EPILOG, short_help="Show the GPU topology; --check: PCIe health evidence and advice."
)
@click.option(
    "--from", "source", type=click.Path(dir_okay=False), help="Saved `nvidia-smi topo -m` output."
)
@click.option(
    "--p2p-check/--no-p2p-check",
    default=True,
    show_default=True,
    help="Live only: copy a known pattern across every GPU pair and read it back.",
)
@click.option(
    "--p2p-timeout",
    type=StrictFloat(min=1, max=3600),
    default=120.0,
    show_default=True,
    help="Seconds before the P2P check (or --check's measurement) counts as hung.",
)
@click.option(
    "--nccl-version",
    type=Version(),
    help="NCCL version, to name the default P2P level [live: torch's NCCL].",
)
@click.option(
    "--check",
    "health",
    is_flag=True,
    help="Measure P2P and host<->device bandwidth/latency, read ACS/IOMMU/link state and the driver's "
    "P2P support, dump NCCL's topology and graphs, and advise.",
)
@output_option(
    "With --check: write topo-check.json, NCCL's XML dumps and a heatmap into this directory "
    "(never over earlier ones).",
    dest="output_dir",
    directory=True,
    old=("--output-dir",),
)
@click.option(
    "--bytes",
    "nbytes",
    type=click.IntRange(4096, 1 << 32),
    default=32 << 20,
    show_default=True,
    help="With --check: bytes per copy.",
)
@click.option(
    "--nccl-job/--no-nccl-job",
    default=True,
    show_default=True,
    help="With --check: run the short NCCL job that writes NCCL's topology and graph dumps.",
)
@format_option
def command(
    source, p2p_check, p2p_timeout, nccl_version, health, output_dir, nbytes, nccl_job, fmt
):
    """Read the GPU topology from a saved `nvidia-smi topo -m` (--from) or from this machine
    (nvidia-smi, NVML, torch's peer-access matrix; each missing source is named), and show for
    each NCCL_P2P_LEVEL the GPU pairs NCCL would connect peer-to-peer, grouping levels that
    connect the same pairs. Live, it also checks real data across every GPU pair, because the
    driver can report P2P that corrupts data or hangs. Exits 1 when that check fails.

    With --check: every GPU pair's bandwidth and latency with peer access enabled and disabled
    (copy engine and SM copies, both directions), host<->device per GPU, an all-to-one test, every
    copy verified; ACS on the bridges above the GPUs, the IOMMU mode, each link's generation and width
    under load, `nvidia-smi topo -p2p r/w/n`; NCCL's own topology and graph dumps; findings and advice,
    each with its evidence. Checks that cannot be read here say why.
    """
    if health:
        if source:
            raise click.UsageError(
                "--check measures this machine; --from reads a saved topology (use one)"
            )
        return _check(p2p_timeout, output_dir, nbytes, nccl_job, fmt)
    if output_dir:
        raise click.UsageError("--output goes with --check")
    vendor = None
    if source:
        topo = load_topo(source)
        topo.source = str(source)
    else:
        from ncclprobe.evidence.live.topo_live import host_cpu_vendor, read_live_topology

        topo = read_live_topology(p2p_check=p2p_check, p2p_timeout_s=p2p_timeout)
        vendor, nccl_version = host_cpu_vendor(), nccl_version or _torch_nccl_version()
    default = default_p2p_level(nccl_version, vendor, len(topo.gpus))
    doc = {
        **topo.to_json(),
        "nccl_version": nccl_version,
        "cpu_vendor": vendor,
        "default_p2p_level": default,
    }
    extra = [f"NCCL {nccl_version} default P2P level here: {default}"] if default else []
    emit(fmt, doc, matrix_rows(topo), title=_title(topo), notes=notes(topo) + extra)
    return topo.verdict()


def _check(timeout, output_dir, nbytes, nccl_job, fmt):
    from ncclprobe.diagnose.p2p.check import check_output_dir, check_report, save
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.gather.p2p import gather_p2p

    if output_dir:
        check_output_dir(output_dir)
    click.echo(
        "topo --check: measuring (P2P pairs, host<->device), then the platform and an NCCL job ...",
        err=True,
    )
    report = check_report(
        Evidence(p2p=gather_p2p(timeout_s=timeout, nbytes=nbytes, nccl_job=nccl_job))
    )
    if output_dir:
        for path in save(report.to_json(), output_dir):
            click.echo(f"wrote {path}", err=True)
    emit_report(report, fmt)
    return report.verdict()


def _title(topo: Topology) -> str:
    s = topo.summary
    nvlink = {True: "yes", False: "no", None: "unknown"}[s["nvlink"]]
    if s["nvlink"] and s.get("links"):
        nvlink += f" ({s['links']})"  # whether NVLink joins every GPU, which LL128 needs
    return (
        f"{s['gpu_count']} GPU(s), NVLink {nvlink}, "
        f"worst path {s['worst_path'] or '-'}, NUMA nodes {s['numa_spread'] or '?'} ({topo.source})"
    )


def matrix_rows(topo: Topology) -> list[dict]:
    rows = []
    for gpu, links in zip(topo.gpus, topo.gpu_links):
        row: dict[str, str | int | None] = {"": f"GPU{gpu.index}"}
        row.update({f"GPU{j}": code or "?" for j, code in enumerate(links)})
        row.update({"CPU affinity": gpu.cpu_affinity, "NUMA": gpu.numa_affinity})
        rows.append(row)
    return rows


def notes(topo: Topology) -> list[str]:
    levels = p2p_level_pairs(topo)
    out = []
    for group in equivalent_levels(topo):
        pairs = levels[group[0]]
        shown = " ".join(f"{i}-{j}" for i, j in sorted(pairs)[:12]) + (
            " ..." if len(pairs) > 12 else ""
        )
        out.append(f"NCCL_P2P_LEVEL {'/'.join(group)}: {len(pairs)} P2P pair(s) {shown}".rstrip())
    if topo.nics:
        out.append(
            "NICs: "
            + ", ".join(
                f"{n} ({topo.nic_devices[n]})" if n in topo.nic_devices else n for n in topo.nics
            )
        )
    out += [f"source {name}: {state}" for name, state in topo.sources.items()]
    if topo.p2p_check:
        out.append(
            f"P2P data check: {topo.p2p_check['status']}"
            + (f" ({topo.p2p_check['reason']})" if topo.p2p_check.get("reason") else "")
        )
    return out + topo.notes


def _torch_nccl_version() -> str | None:
    try:
        import torch

        return ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except Exception:  # no torch, or a build without NCCL: the default level stays unnamed
        return None
