"""Read this machine's GPU topology from every source there is, naming each one that is missing.

Sources, best first: `nvidia-smi topo -m` (parsed by `ncclprobe.evidence.node.topo`), NVML through
nvidia-ml-py (common-ancestor levels and NVLink counts), torch's peer-access matrix, and the real
P2P data check (`ncclprobe.probes.p2p_check`, run in its own process group with a timeout, since
a broken P2P path can hang). A missing source is recorded in `Topology.sources`, never fatal; only
when no source can see a GPU is the topology Unsupported.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from typing import Any

from ncclprobe.errors import Unsupported, UsageProblem
from ncclprobe.evidence.node.topo import GpuInfo, Topology, parse_topo
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.secrets import mask_text

log = logging.getLogger("ncclprobe.topo")

# NVML common-ancestor levels (nvmlGpuTopologyLevel_t) -> nvidia-smi codes
_NVML_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def read_live_topology(
    *, p2p_check: bool = False, p2p_timeout_s: float = 120.0, p2p_bytes: int = 64 << 20
) -> Topology:
    """The live topology; `sources` says what each source gave ("used", "missing: ...", ...).

    The P2P data check moves real data and can take a while (or hit its timeout on a broken
    path), so it runs only when asked: `ncclprobe topo` asks by default."""
    sources: dict[str, str] = {}
    topo = _from_nvidia_smi(sources)
    nvml = _from_nvml(sources, needed=topo is None)
    topo = topo or nvml
    peers = _peer_access(sources)
    if topo is None and peers is not None:
        topo = Topology(
            gpus=[GpuInfo(i) for i in range(len(peers))],
            gpu_links=[
                ["X" if i == j else None for j in range(len(peers))] for i in range(len(peers))
            ],
            source="torch",
        )
        topo.notes.append(
            "link types unknown (no nvidia-smi, no NVML): P2P-level pairs cannot be derived"
        )
    if topo is None:
        raise Unsupported(
            "no GPU topology readable here: " + "; ".join(f"{k} {v}" for k, v in sources.items())
        )
    topo.peer_access = peers
    if p2p_check:
        topo.p2p_check = run_p2p_check(timeout_s=p2p_timeout_s, nbytes=p2p_bytes)
        sources["p2p_check"] = topo.p2p_check["status"]
    else:
        sources["p2p_check"] = "skipped (not asked for)"
    topo.sources = sources
    return topo


def live_node_facts(
    *, gpus: int | None = None, over_network: bool = False, topology: Topology | None = None
) -> NodeFacts | None:
    """What NCCL's topology rules need about the first `gpus` CUDA devices of this machine (default
    all), from its topology (read here unless given) and torch's compute capabilities; None
    without a readable topology."""
    from ncclprobe.evidence.node.topo import node_facts
    from ncclprobe.provenance import compute_capabilities

    try:
        topo = topology or read_live_topology()
    except Exception as exc:  # no GPU, no nvidia-smi/NVML: the rules say what they could not decide
        log.debug("no live GPU topology for the NCCL rules (%s)", exc)
        return None
    caps = compute_capabilities() or []
    physical = _physical_indices(len(caps), len(topo.gpus))
    if physical is None:
        return node_facts(
            topo, over_network=over_network
        )  # links of every GPU; which are used is unknown
    used = physical[:gpus] if gpus else physical
    by_index = {p: caps[i] for i, p in enumerate(physical)}
    return node_facts(
        topo,
        gpus=used,
        compute_capabilities=[by_index.get(i, 0) for i in range(len(topo.gpus))],
        over_network=over_network,
    )


def _physical_indices(visible: int, total: int) -> list[int] | None:
    """nvidia-smi's index of each CUDA device (CUDA_VISIBLE_DEVICES as integers); None when unknown."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list(range(total)) if visible == total else None
    try:
        indices = [int(part) for part in listed.split(",") if part.strip()]
    except ValueError:  # UUIDs or MIG names: the mapping needs NVML
        return None
    return indices if len(indices) == visible and all(0 <= i < total for i in indices) else None


def host_cpu_vendor() -> str | None:
    """ "intel", "amd", "zhaoxin" or "arm" for this host (what NCCL's default P2P level depends on)."""
    import platform

    if platform.machine().lower() in ("aarch64", "arm64"):
        return "arm"
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read(65536)
    except OSError:
        return None
    for needle, vendor in (
        ("GenuineIntel", "intel"),
        ("AuthenticAMD", "amd"),
        ("CentaurHauls", "zhaoxin"),
        ("Shanghai", "zhaoxin"),
    ):
        if needle in text:
            return vendor
    return None


def _from_nvidia_smi(sources: dict) -> Topology | None:
    if shutil.which("nvidia-smi") is None:
        sources["nvidia-smi"] = "missing: not on PATH"
        return None
    try:
        proc = subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        sources["nvidia-smi"] = f"failed: {exc}"
        return None
    if proc.returncode != 0:
        sources["nvidia-smi"] = (
            f"failed: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}"
        )
        return None
    try:
        topo = parse_topo(proc.stdout)
    except UsageProblem as exc:
        sources["nvidia-smi"] = f"failed: {exc}"
        return None
    topo.source = "nvidia-smi"
    sources["nvidia-smi"] = "used"
    return topo


def _from_nvml(sources: dict, *, needed: bool) -> Topology | None:
    try:
        import pynvml
    except ImportError:
        sources["nvml"] = "missing: nvidia-ml-py not installed (pip install nvidia-ml-py)"
        return None
    if not needed:
        sources["nvml"] = "available, not needed"
        return None
    try:
        pynvml.nvmlInit()
        try:
            topo = _nvml_topology(pynvml)
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        sources["nvml"] = f"failed: {exc}"
        return None
    sources["nvml"] = "used"
    return topo


def _nvml_topology(pynvml: Any) -> Topology:
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    buses = [pynvml.nvmlDeviceGetPciInfo(h).busId for h in handles]
    buses = [b.decode() if isinstance(b, bytes) else b for b in buses]
    links = [
        [_nvml_link(pynvml, handles, buses, i, j) for j in range(len(handles))]
        for i in range(len(handles))
    ]
    return Topology(gpus=[GpuInfo(i) for i in range(len(handles))], gpu_links=links, source="nvml")


def _nvml_link(pynvml: Any, handles: list, buses: list[str], i: int, j: int) -> str | None:
    if i == j:
        return "X"
    nvlinks = _nvlink_count(pynvml, handles[i], buses[j])
    if nvlinks:
        return f"NV{nvlinks}"
    try:
        return _NVML_LEVELS.get(pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
    except pynvml.NVMLError:
        return None


def _nvlink_count(pynvml: Any, handle: object, peer_bus: str) -> int:
    count = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
            remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId
        except pynvml.NVMLError:
            continue
        remote = remote.decode() if isinstance(remote, bytes) else remote
        count += remote.lower() == peer_bus.lower()
    return count


def _peer_access(sources: dict) -> list[list[bool]] | None:
    from ncclprobe.provenance import gpu_device_visible

    if not gpu_device_visible():
        sources["torch"] = "missing: no GPU device in /dev"
        return None
    try:
        import torch
    except ImportError:
        sources["torch"] = "missing: torch not installed"
        return None
    if not torch.cuda.is_available():
        sources["torch"] = "missing: torch sees no CUDA GPU"
        return None
    n = torch.cuda.device_count()
    sources["torch"] = "used"
    return [
        [i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)]
        for i in range(n)
    ]


def run_json_probe(command: list[str], timeout_s: float) -> tuple[str, str, int | None]:
    """Run a probe that prints JSON lines, in its own process group; (stdout, stderr, exit code or
    None when it hung and was killed with its group)."""
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return out, err, None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return out, err, proc.returncode


def json_lines(out: str) -> list[dict]:
    records = []
    for line in (out or "").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # torn, 5000 digits, nesting: no message
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def run_p2p_check(
    *, timeout_s: float = 120.0, nbytes: int = 64 << 20, command: list[str] | None = None
) -> dict:
    """Run the data check in its own process group; a hang is killed and reported with the pair
    it was on. Returns the summary dict with the per-pair results under "pairs". `command`
    replaces the check itself (tests use it to exercise the hang path)."""
    command = command or [
        sys.executable,
        "-m",
        "ncclprobe.probes.p2p_check",
        "--bytes",
        str(nbytes),
    ]
    out, err, code = run_json_probe(command, timeout_s)
    if code is None:
        return _summary(
            out,
            {
                "status": "hang",
                "reason": f"no answer within {timeout_s:.0f} s: "
                "a P2P copy never completed (killed)",
            },
            hung=True,
        )
    summary = _summary(out, None)
    if code not in (0, 1) or (
        "pairs_checked" not in summary and summary["status"] != "unavailable"
    ):
        tail = (err or "").strip().splitlines()[-1:] or ["no output"]
        reason = f"check exited {code}: {mask_text(tail[0])[:200]}"  # stderr: masked as it leaves
        return {**summary, "status": "error", "reason": reason}
    return summary


def _summary(out: str, override: dict | None, *, hung: bool = False) -> dict:
    records = json_lines(out)
    pairs = [r["pair"] for r in records if "pair" in r]
    started = [r["checking"] for r in records if "checking" in r]
    if hung and override and len(started) > len(pairs):
        src, dst = started[-1]
        override = {
            **override,
            "reason": override["reason"] + f" on GPU{src} -> GPU{dst}",
            "hung_pair": [src, dst],
        }
    final = override or next(
        (r for r in reversed(records) if "status" in r),
        {"status": "error", "reason": "the check printed no summary"},
    )
    return {**final, "pairs": pairs}
