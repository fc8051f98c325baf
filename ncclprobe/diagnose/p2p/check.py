"""`ncclprobe topo --check` as one library call: measure, read the platform, ask NCCL what it built,
judge, advise.

Order matters: the measurement runs first (in its own process group, killed on timeout, because a
broken P2P path hangs), and it samples each GPU's link state while a transfer runs, which the link
check then uses (GPUs lower their link speed when idle). The NCCL job runs after, with one rank per
GPU. Every part that cannot run here says why; only bad input is an error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ncclprobe import tempdirs
from ncclprobe.diagnose.p2p.advice import advise
from ncclprobe.diagnose.p2p.findings import P2PFinding, matrix_findings
from ncclprobe.diagnose.p2p.platform import platform_checks, run_command
from ncclprobe.errors import UsageProblem, require_extra
from ncclprobe.evidence.live.sysfs import crossing, read_gpu_paths
from ncclprobe.evidence.live.topo_live import json_lines, run_json_probe
from ncclprobe.evidence.nccl.nccl_xml import model_disagreements, read_graphs, read_topology
from ncclprobe.evidence.node.matrix import Matrix
from ncclprobe.safe_output import write_text
from ncclprobe.secrets import mask_text
from ncclprobe.verdict import Verdict

SCHEMA_VERSION = 1


def run_check(
    *,
    timeout_s: float = 240.0,
    nbytes: int = 32 << 20,
    nccl_job: bool = True,
    root: str = "/",
    run=run_command,
    probe_command: list[str] | None = None,
    work_dir: str | None = None,
) -> dict:
    measured = measure(timeout_s, nbytes, probe_command)
    paths, _ = read_gpu_paths(root)
    under_load = {s["bdf"]: s for s in measured["link_under_load"] if s and s.get("bdf")}
    checks = platform_checks(root, run, under_load)
    nccl = (
        nccl_dumps(work_dir, timeout_s=min(120.0, timeout_s)) if nccl_job else {"status": "skipped"}
    )
    by_bdf = {p.bdf: p for p in paths}
    gpu_paths = [by_bdf.get(b) for b in measured["devices"]]
    where = lambda i, j: (
        crossing(gpu_paths[i], gpu_paths[j])
        if i < len(gpu_paths) and j < len(gpu_paths) and gpu_paths[i] and gpu_paths[j]
        else None
    )
    findings = matrix_findings(
        measured["matrices"], measured["peer_access"], where=where, corrupt=measured["copy_checks"]
    )
    if measured["status"] == "hang":
        findings.insert(
            0,
            P2PFinding("error", "p2p-hang", measured["reason"], tuple(measured.get("hung") or ())),
        )
    topology = _smi_topology(run)
    advice = advise(findings, checks, topology, measured=bool(measured["matrices"]))
    disagree = model_disagreements(
        nccl.get("topology_obj"), nccl.get("graphs_obj") or [], measured["matrices"]
    )
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "topo-check",
        "measurement": {
            k: measured[k] for k in ("status", "reason", "devices", "peer_access", "notes")
        },
        "matrices": [m.to_record() for m in measured["matrices"]],
        "platform": [c.to_json() for c in checks],
        "nccl": {k: v for k, v in nccl.items() if not k.endswith("_obj")},
        "nccl_model_vs_measured": disagree,
        "findings": [f.to_json() for f in findings],
        "advice": [a.to_json() for a in advice],
    }
    return doc


def _smi_topology(run):
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
    command = command or [
        sys.executable,
        "-m",
        "ncclprobe.probes.p2p_bandwidth",
        "--bytes",
        str(nbytes),
    ]
    out, err, code = run_json_probe(command, timeout_s)
    records = json_lines(out)
    result = {
        "status": "error",
        "reason": None,
        "devices": [],
        "peer_access": None,
        "matrices": [],
        "copy_checks": [],
        "link_under_load": [],
        "notes": [],
        "hung": None,
    }
    for r in records:
        if "matrix" in r:
            result["matrices"].append(Matrix(**r["matrix"]))
        elif "peer_access" in r:
            result["peer_access"] = r["peer_access"]
        elif "devices" in r and isinstance(r["devices"], list):
            result["devices"] = r["devices"]
        elif "link_under_load" in r:
            result["link_under_load"].append(r["link_under_load"]["state"])
        elif "copy_checks" in r:
            result["copy_checks"] = r["copy_checks"]
        elif "note" in r:
            result["notes"].append(r["note"])
        elif "status" in r:
            result["status"], result["reason"] = r["status"], r.get("reason")
    if code is None:
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
    elif result["status"] == "error" and result["reason"] is None:
        tail = (err or "").strip().splitlines()[-1:] or ["no output"]
        result["reason"] = f"measurement exited {code}: {mask_text(tail[0])[:300]}"
    return result


def _mask_messages(result: dict) -> None:
    """A job's stderr quoted in its result (a reason, the ranks that failed) goes into
    topo-check.json and the table: masked like every output (`ncclprobe.secrets`)."""
    if isinstance(result.get("reason"), str):
        result["reason"] = mask_text(result["reason"])
    if isinstance(result.get("failed"), list):
        result["failed"] = [mask_text(str(line)) for line in result["failed"]]


def nccl_dumps(work_dir: str | None, timeout_s: float = 120.0) -> dict:
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
        _mask_messages(result)
        for name, key, reader in (
            ("nccl-topo.xml", "topology", read_topology),
            ("nccl-graph.xml", "graphs", read_graphs),
        ):
            path = Path(where) / name
            if not path.exists():
                result.setdefault("missing", []).append(f"{name}: NCCL wrote no such dump")
                continue
            text = path.read_text(errors="replace")
            result[key + "_xml"] = text
            try:
                parsed = reader(text)
            except UsageProblem as exc:
                result.setdefault("missing", []).append(f"{name}: {exc}")
                continue
            result[key + "_obj"] = parsed
            result[key] = parsed.to_json() if key == "topology" else [g.to_json() for g in parsed]
    return result


OUTPUT_FILES = ("topo-check.json", "nccl-topo.xml", "nccl-graph.xml", "p2p-heatmap.png")


def check_output_dir(directory: str | Path) -> None:
    """Refuse, before anything is measured, a directory that holds anything (an earlier check, the
    user's own files): the one directory rule of `ncclprobe.safe_output`, so no stale file sits beside
    new results."""
    from ncclprobe.safe_output import check_output_dir as refuse_unless_new

    require_extra("matplotlib", "report", "the P2P heatmap that --check --output writes")
    refuse_unless_new(directory, what="--output", has_force=False)


def save(doc: dict, directory: str | Path) -> list[Path]:
    """topo-check.json and NCCL's XML dumps into `directory`; never overwrite, never leave half a file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"topo-check.json": json.dumps(doc, indent=2, allow_nan=False) + "\n"}
    for key, name in (("topology_xml", "nccl-topo.xml"), ("graphs_xml", "nccl-graph.xml")):
        if doc.get("nccl", {}).get(key):
            files[name] = doc["nccl"][key]
    check_output_dir(directory)
    written = [
        write_text(directory / name, text, what="--output file")  # whole, never over a file
        for name, text in files.items()
    ]
    from ncclprobe.report.heatmap import write_heatmap

    picture = write_heatmap(
        [Matrix.from_record(r) for r in doc.get("matrices", [])],
        directory / "p2p-heatmap.png",
        "topo --check",
    )
    return written + ([picture] if picture else [])


def verdict(doc: dict) -> Verdict:
    """FINDINGS on an error; NOTHING_HERE (exit 3, as plain `topo`) when no GPU pair or host copy
    could be measured here, whatever the platform checks read: the question was not answered."""
    if any(f["severity"] == "error" for f in doc["findings"]):
        return Verdict.FINDINGS
    return Verdict.NOTHING_HERE if doc["measurement"]["status"] == "unavailable" else Verdict.FINE
