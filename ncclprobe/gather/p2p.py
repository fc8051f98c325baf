"""`topo --check`'s evidence, gathered live: measure, read the platform, ask NCCL what it built.

Order matters: the measurement runs first (in its own process group, killed on timeout, because a
broken P2P path hangs), and it samples each GPU's link state while a transfer runs, which the link
check then uses (GPUs lower their link speed when idle). The NCCL job runs after, with one rank per
GPU. Every part that cannot run here says why; only bad input is an error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ncclprobe import tempdirs
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live.platform import read_platform, run_command
from ncclprobe.evidence.live.topo_live import json_lines, run_json_probe
from ncclprobe.evidence.nccl.nccl_xml import read_graphs, read_topology
from ncclprobe.evidence.node.matrix import Matrix
from ncclprobe.evidence.node.topo import Topology
from ncclprobe.evidence.p2p import P2PEvidence
from ncclprobe.secrets import mask_text


def gather_p2p(
    *,
    timeout_s: float = 240.0,
    nbytes: int = 32 << 20,
    nccl_job: bool = True,
    root: str = "/",
    run: Callable[[list[str]], tuple[int, str] | None] = run_command,
    probe_command: list[str] | None = None,
    work_dir: str | None = None,
) -> P2PEvidence:
    measured = measure(timeout_s, nbytes, probe_command)
    under_load = {s["bdf"]: s for s in measured["link_under_load"] if s and s.get("bdf")}
    platform = read_platform(root, run, under_load)
    nccl = (
        nccl_dumps(work_dir, timeout_s=min(120.0, timeout_s)) if nccl_job else {"status": "skipped"}
    )
    by_bdf = {p.bdf: p for p in platform.paths}
    return P2PEvidence(
        matrices=measured["matrices"],
        peer_access=measured["peer_access"],
        measurement=measured,
        platform=platform,
        nccl=nccl,
        topology=_smi_topology(run),
        gpu_paths=[by_bdf.get(b) for b in measured["devices"]],
    )


def _smi_topology(run: Callable[[list[str]], tuple[int, str] | None]) -> Topology | None:
    """`nvidia-smi topo -m`, for the path types the P2P-level advice needs; None when not readable."""
    from ncclprobe.evidence.node.topo import parse_topo

    result = run(["nvidia-smi", "topo", "-m"])
    if not result or result[0] != 0:
        return None
    try:
        return parse_topo(result[1])
    except UsageProblem:
        return None


def measure(timeout_s: float, nbytes: int, command: list[str] | None = None) -> dict:
    """The P2P bandwidth probe's result, read from its JSON lines; a hang names the pair it was in."""
    command = command or [
        sys.executable,
        "-m",
        "ncclprobe.probes.p2p_bandwidth",
        "--bytes",
        str(nbytes),
    ]
    out, err, code = run_json_probe(command, timeout_s)
    records = json_lines(out)
    matrices: list[Matrix] = []
    under_load: list[dict] = []
    notes: list[str] = []
    result: dict[str, Any] = {
        "status": "error",
        "reason": None,
        "devices": [],
        "peer_access": None,
        "matrices": matrices,
        "copy_checks": [],
        "link_under_load": under_load,
        "notes": notes,
        "hung": None,
    }
    for r in records:
        if "matrix" in r:
            matrices.append(Matrix(**r["matrix"]))
        elif "peer_access" in r:
            result["peer_access"] = r["peer_access"]
        elif "devices" in r and isinstance(r["devices"], list):
            result["devices"] = r["devices"]
        elif "link_under_load" in r:
            under_load.append(r["link_under_load"]["state"])
        elif "copy_checks" in r:
            result["copy_checks"] = r["copy_checks"]
        elif "note" in r:
            notes.append(r["note"])
        elif "status" in r:
            result["status"], result["reason"] = r["status"], r.get("reason")
    if code is None:
        _hung(result, records, timeout_s)
    elif result["status"] == "error" and result["reason"] is None:
        tail = (err or "").strip().splitlines()[-1:] or ["no output"]
        result["reason"] = f"measurement exited {code}: {mask_text(tail[0])[:300]}"
    return result


def _hung(result: dict, records: list[dict], timeout_s: float) -> None:
    started = [r["checking"] for r in records if "checking" in r]
    result["status"] = "hang"
    result["hung"] = [tuple(started[-1][:2])] if started else None
    result["reason"] = (
        f"no answer within {timeout_s:.0f} s"
        + (
            f" on GPU{started[-1][0]} -> GPU{started[-1][1]} "
            f"(P2P={'enabled' if started[-1][2] == 'on' else 'disabled'})"
            if started
            else ""
        )
        + ": a copy never completed (killed)"
    )


def mask_messages(result: dict) -> None:
    """A job's stderr quoted in its result (a reason, the ranks that failed) goes into
    topo-check.json and the table: masked like every output (`ncclprobe.secrets`)."""
    if isinstance(result.get("reason"), str):
        result["reason"] = mask_text(result["reason"])
    if isinstance(result.get("failed"), list):
        result["failed"] = [mask_text(str(line)) for line in result["failed"]]


def nccl_dumps(work_dir: str | None, timeout_s: float = 120.0) -> dict:
    """A short NCCL job (one rank per GPU) that writes NCCL's topology and graph dumps, parsed."""
    with tempdirs.owned(
        "ncclprobe-dump-"
    ) as tmp:  # reaped by the next run if this one is SIGKILLed
        where = work_dir or str(tmp)
        out, err, code = run_json_probe(
            [
                sys.executable,
                "-m",
                "ncclprobe.probes.nccl_dump",
                "--out",
                where,
                "--timeout",
                str(timeout_s),
            ],
            timeout_s + 30,
        )
        records = json_lines(out)
        result = (
            records[-1]
            if records
            else {"status": "error", "reason": (err or "no output").strip()[-300:]}
        )
        if code is None:
            result = {
                "status": "hang",
                "reason": f"the NCCL job gave no answer within {timeout_s:.0f} s",
            }
        mask_messages(result)
        for name, key, reader in (
            ("nccl-topo.xml", "topology", read_topology),
            ("nccl-graph.xml", "graphs", read_graphs),
        ):
            _read_dump(Path(where) / name, name, key, reader, result)
    return result


def _read_dump(path: Path, name: str, key: str, reader: Callable[[str], Any], result: dict) -> None:
    if not path.exists():
        result.setdefault("missing", []).append(f"{name}: NCCL wrote no such dump")
        return
    text = path.read_text(errors="replace")
    result[key + "_xml"] = text
    try:
        parsed = reader(text)
    except UsageProblem as exc:
        result.setdefault("missing", []).append(f"{name}: {exc}")
        return
    result[key + "_obj"] = parsed
    result[key] = parsed.to_json() if key == "topology" else [g.to_json() for g in parsed]
